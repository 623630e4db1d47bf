package stack

import (
	"log/slog"
	"net/url"
	"os"
	"strings"
)

// A postgres:// backend's password (PGPASSWORD, in the operator's environment or Config.Env)
// would reach every process the Manager starts through its environment: the CLI and the engine
// host, which need it to open the backend, and the provider plugins they start, which do not but
// inherit it, where /proc/<pid>/environ shows it. So the Manager puts it in a password file
// (PGPASSFILE, which the backend's driver lib/pq reads when PGPASSWORD is absent) that lives in
// memory only (memoryFile: never on a disk or volume), and leaves PGPASSWORD out of those
// processes' environment: they get the file's path, not the password. Without memory files (not
// Linux) PGPASSWORD stays as it is.

// pgpassName is the memory file's name, seen only in /proc/<pid>/fd.
const pgpassName = "pulumi-operator-pgpass"

// pgpassLine is a password file line that matches every host, port, database and user (the
// backend URL names them), with the password escaped as the format requires (':' and '\').
func pgpassLine(password string) string {
	return "*:*:*:*:" + strings.NewReplacer(`\`, `\\`, `:`, `\:`).Replace(password) + "\n"
}

// movePGPassword moves a postgres:// backend's password from env (the Manager's additions) and
// this process's environment into a memory file: env then holds PGPASSFILE instead, and the
// returned names are to be left out of the inherited environment. The file is returned to be
// kept open for the Manager's life. Nothing changes for another backend, without a password, or
// when the file cannot be made (a warning is logged: the password then stays in PGPASSWORD).
func movePGPassword(backendURL string, env map[string]string) (keep *os.File, drop []string) {
	u, err := url.Parse(backendURL)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return nil, nil
	}
	password, ok := env["PGPASSWORD"]
	if !ok {
		password = os.Getenv("PGPASSWORD")
	}
	if password == "" {
		return nil, nil
	}
	f, path, err := memoryFile(pgpassName, []byte(pgpassLine(password)))
	if err != nil {
		slog.Warn("the backend's password stays in PGPASSWORD, which the provider plugins inherit", "error", err)
		return nil, nil
	}
	addRedaction(password)
	delete(env, "PGPASSWORD")
	env["PGPASSFILE"] = path
	return f, []string{"PGPASSWORD"}
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
