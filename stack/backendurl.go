package stack

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
)

// prepareBackend checks the backend URL (no credentials in it: credentialsInURL) and creates a
// file:// backend's directory.
func prepareBackend(raw string) (string, error) {
	if raw == "" {
		return "", errors.New("configure stack manager: empty backend URL")
	}
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" {
		return "", fmt.Errorf("configure stack manager: backend URL %q: want file:///dir, postgres://, s3://, gs://, azblob:// or https://", RedactURL(raw))
	}
	if err := credentialsInURL(u); err != nil {
		return "", err
	}
	if u.Scheme != "file" {
		return raw, nil
	}
	dir := u.Path
	if u.Host != "" && u.Host != "localhost" { // file://relative/dir
		dir = filepath.Join(u.Host, u.Path)
	}
	if dir == "" {
		return "", fmt.Errorf("configure stack manager: backend URL %q names no directory", raw)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("configure stack manager: backend directory %q: %w", dir, err)
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return "", fmt.Errorf("create backend directory: %w", err)
	}
	return "file://" + abs, nil
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
	return fmt.Errorf("configure stack manager: %w: %s: Pulumi and the workspaces on the state volume would keep it in clear; remove it from the URL and give it %s",
		ErrCredentialsInURL, RedactURL(u.String()), where)
}

// postgresAppName is the application_name this Manager's pulumi processes connect to a
// PostgreSQL backend with (PGAPPNAME, which lib/pq, the backend's driver, reads; an
// application_name in the URL wins over it): "pulumi-operator@<host name>", so that a database
// administrator sees in pg_stat_activity, and a trigger can record, which operator replica a
// connection is. "" for another backend, when PGAPPNAME is set already, or without a host name.
func postgresAppName(backendURL string) string {
	u, err := url.Parse(backendURL)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") || os.Getenv("PGAPPNAME") != "" {
		return ""
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		return ""
	}
	return "pulumi-operator@" + host
}

// isCloud reports whether backendURL is Pulumi Cloud's (http or https; pkg/v3 backend/diy
// IsDIYBackendURL's rule), as opposed to a DIY backend's bucket URL. An empty URL is the CLI's
// default, Pulumi Cloud.
func isCloud(backendURL string) bool {
	u, err := url.Parse(backendURL)
	return backendURL == "" || (err == nil && (u.Scheme == "http" || u.Scheme == "https"))
}
