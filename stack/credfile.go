package stack

import (
	"log/slog"
	"os"
	"strings"
)

// A backend's credentials (PGPASSWORD for postgres://, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY
// and AWS_SESSION_TOKEN for s3://, in the operator's environment or Config.Env) would reach every
// process the Manager starts through its environment: the CLI and the engine host, which need
// them to open the backend, and the provider plugins they start, which do not but inherit them,
// where /proc/<pid>/environ shows them. So the Manager puts them in the file their driver reads
// when the variables are absent (PGPASSFILE for lib/pq, AWS_SHARED_CREDENTIALS_FILE for the AWS
// SDK), a file that lives in memory only (memoryFile: never on a disk or volume), and leaves the
// variables out of those processes' environment: they get the file's path, not the secret.
// Without memory files (not Linux) the variables stay as they are.

// pgpassLine is a password file line that matches every host, port, database and user (the
// backend URL names them), with the password escaped as the format requires (':' and '\').
func pgpassLine(password string) string {
	return "*:*:*:*:" + strings.NewReplacer(`\`, `\\`, `:`, `\:`).Replace(password) + "\n"
}

// awsCredentials is an AWS shared credentials file holding one profile (AWS_PROFILE, else
// default) with the key, the secret and, when there is one, the session token.
func awsCredentials(profile, id, secret, token string) string {
	if profile == "" {
		profile = "default"
	}
	out := "[" + profile + "]\naws_access_key_id = " + id + "\naws_secret_access_key = " + secret + "\n"
	if token != "" {
		out += "aws_session_token = " + token + "\n"
	}
	return out
}

// moveCredentials moves the credentials of backend's kind (PostgreSQL, S3) from env (the
// Manager's additions) and this process's environment into a memory file: env then names the
// file instead, and the returned names are to be left out of the inherited environment. The file
// is returned to be kept open for the Manager's life. Nothing changes for another backend,
// without credentials in the environment, or when the file cannot be made (a warning is logged:
// the variables then stay).
func moveCredentials(backend Backend, env map[string]string) (keep *os.File, drop []string) {
	get := func(name string) string {
		if v, ok := env[name]; ok {
			return v
		}
		return os.Getenv(name)
	}
	var name, fileVar, content string
	var secrets []string
	switch backend.Kind {
	case BackendPostgres:
		password := get("PGPASSWORD")
		if password == "" {
			return nil, nil
		}
		name, fileVar, content = "pulumi-operator-pgpass", "PGPASSFILE", pgpassLine(password)
		drop, secrets = []string{"PGPASSWORD"}, []string{password}
	case BackendS3:
		id, secret, token := get("AWS_ACCESS_KEY_ID"), get("AWS_SECRET_ACCESS_KEY"), get("AWS_SESSION_TOKEN")
		if id == "" || secret == "" {
			return nil, nil
		}
		name, fileVar, content = "pulumi-operator-aws-credentials", "AWS_SHARED_CREDENTIALS_FILE", awsCredentials(get("AWS_PROFILE"), id, secret, token)
		drop, secrets = []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"}, []string{secret, token}
	default:
		return nil, nil
	}
	f, path, err := memoryFile(name, []byte(content))
	if err != nil {
		slog.Warn("the backend's credentials stay in the environment, which the provider plugins inherit", "variables", drop, "error", err)
		return nil, nil
	}
	for _, s := range secrets {
		addRedaction(s)
	}
	for _, v := range drop {
		delete(env, v)
	}
	env[fileVar] = path
	return f, drop
}

// without returns the entries of environ ("NAME=value") whose names are not in names.
func without(environ []string, names []string) []string {
	if len(names) == 0 {
		return environ
	}
	out := make([]string, 0, len(environ))
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		drop := false
		for _, n := range names {
			drop = drop || name == n
		}
		if !drop {
			out = append(out, kv)
		}
	}
	return out
}
