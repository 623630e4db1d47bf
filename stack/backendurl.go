package stack

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
)

// BackendKind is the kind of state backend a backend URL names, told by its scheme.
type BackendKind int

// The kinds of backend. Every kind but BackendCloud is a DIY backend: Pulumi's own code
// (pkg/v3 backend/diy) keeps the state in a bucket, and the engine host can serve it.
const (
	// BackendFile is a directory on this machine: file:///abs/dir (or file://rel/dir, taken from
	// the current directory).
	BackendFile BackendKind = iota + 1
	// BackendPostgres is a PostgreSQL database: postgres:// or postgresql://.
	BackendPostgres
	// BackendS3 is an S3 bucket, AWS's or an S3-compatible endpoint's: s3://.
	BackendS3
	// BackendCloud is Pulumi Cloud or a self-hosted Pulumi service: http:// or https:// (pkg/v3
	// backend/diy IsDIYBackendURL's rule: every other scheme is a DIY backend's).
	BackendCloud
	// BackendOtherDIY is any other DIY bucket (gs://, azblob://, ...), which the pulumi CLI
	// opens itself: nothing here reads it.
	BackendOtherDIY
)

// Backend is a state backend URL (Config.BackendURL) parsed and checked once, by ParseBackend.
type Backend struct {
	// Kind is what the URL's scheme names.
	Kind BackendKind
	// URL is the parsed URL; for BackendFile, file:// and Dir.
	URL *url.URL
	// Dir is a BackendFile's directory, absolute; "" for every other kind.
	Dir string
	// raw is what String returns.
	raw string
}

// String is the URL as the pulumi CLI and the engine host get it (PULUMI_BACKEND_URL): as it
// was given, except that a file:// URL is "file://" and Dir. It holds no password or secret
// query parameter (ParseBackend refuses them) but may hold a user and host names: logs take
// RedactURL of it.
func (b Backend) String() string { return b.raw }

// wantBackend is what a backend URL may be, for errors that say what to fix.
const wantBackend = "want file:///dir, postgres://, s3://, gs://, azblob:// or https://"

// ParseBackend parses raw, a state backend URL: file:///abs/dir (file://rel/dir is made
// absolute from the current directory; nothing is created), postgres:// or postgresql://,
// s3://, https:// or http:// (Pulumi Cloud), or any other scheme, which the pulumi CLI opens
// as a DIY bucket (gs://, azblob://, ...). Errors say what to fix: an empty URL, one that does
// not parse or has no scheme, a file:// URL that names no directory, a credential in the URL
// (ErrCredentialsInURL, saying which variable takes it instead), or a relative file://
// directory when the current directory cannot be found. No error shows a password.
func ParseBackend(raw string) (Backend, error) {
	if raw == "" {
		return Backend{}, errors.New("empty backend URL: " + wantBackend)
	}
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" {
		return Backend{}, fmt.Errorf("backend URL %q: %s", RedactURL(raw), wantBackend)
	}
	if err := credentialsInURL(u); err != nil {
		return Backend{}, err
	}
	if u.Scheme == "file" {
		return parseFileBackend(u, raw)
	}
	b := Backend{URL: u, raw: raw}
	switch u.Scheme {
	case "postgres", "postgresql":
		b.Kind = BackendPostgres
	case "s3":
		b.Kind = BackendS3
	case "http", "https":
		b.Kind = BackendCloud
	default:
		b.Kind = BackendOtherDIY
	}
	return b, nil
}

// parseFileBackend is ParseBackend's result for u, a file:// URL (raw as given): its
// directory, absolute. The host part is the first element of a relative directory
// (file://rel/dir) unless it is empty or "localhost".
func parseFileBackend(u *url.URL, raw string) (Backend, error) {
	dir := u.Path
	if u.Host != "" && u.Host != "localhost" { // file://relative/dir
		dir = filepath.Join(u.Host, u.Path)
	}
	if dir == "" {
		return Backend{}, fmt.Errorf("backend URL %q names no directory: want file:///dir", raw)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return Backend{}, fmt.Errorf("backend directory %q: %w", dir, err)
	}
	return Backend{Kind: BackendFile, URL: &url.URL{Scheme: "file", Path: abs}, Dir: abs, raw: "file://" + abs}, nil
}

// ErrCredentialsInURL means the backend URL carries a password or another credential (in its
// user part or a query parameter such as password=, sslpassword=, sig=, secret_key=).
// Credentials go in the environment, where the backend's driver reads them, and so never rest
// on disk or show on a command line.
var ErrCredentialsInURL = errors.New("backend URL holds a credential")

// credentialsInURL returns an ErrCredentialsInURL error that says where to put the credential,
// or nil.
func credentialsInURL(u *url.URL) error {
	_, hasPassword := u.User.Password()
	if !hasPassword && !hasSecretQuery(u.RawQuery) {
		return nil
	}
	where := "in the backend's own environment variable"
	switch u.Scheme {
	case "postgres", "postgresql":
		where = "in PGPASSWORD (Secret key pgpassword; chart value backendCredentials.pgpassword)"
	case "s3":
		where = "in AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (Secret keys aws-access-key-id, aws-secret-access-key; chart values backendCredentials.*)"
	case "azblob":
		where = "in AZURE_STORAGE_KEY or AZURE_STORAGE_SAS_TOKEN (extraEnv from a Secret)"
	}
	return fmt.Errorf("%w: %s: Pulumi and the workspaces on the state volume would keep it in clear; remove it from the URL and give it %s",
		ErrCredentialsInURL, RedactURL(u.String()), where)
}

// postgresAppName is the application_name this Manager's pulumi processes connect to a
// PostgreSQL backend with (PGAPPNAME, which lib/pq, the backend's driver, reads; an
// application_name in the URL wins over it): "pulumi-operator@<host name>", so that a database
// administrator sees in pg_stat_activity, and a trigger can record, which operator replica a
// connection is. "" for another backend, when PGAPPNAME is set already, or without a host name.
func postgresAppName(b Backend) string {
	if b.Kind != BackendPostgres || os.Getenv("PGAPPNAME") != "" {
		return ""
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		return ""
	}
	return "pulumi-operator@" + host
}
