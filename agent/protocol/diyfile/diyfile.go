// Package diyfile is what both sides of the engine host (the operator's package stack and
// agent/enginehost) do to the files of a file:// DIY backend directly, where pkg/v3 and gocloud
// offer nothing: one definition, standard library only, like the protocol module it is part of.
package diyfile

import (
	"encoding/json"
	"errors"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
)

// RepairSidecars removes the torn metadata sidecars of stack project/stackName on a file://
// backend and returns their paths; any other backend has none (nil, nil).
//
// The file backend is gocloud's fileblob (gocloud.dev/blob/fileblob), which keeps each blob's
// metadata in "<file>.attrs" beside it. It writes the blob itself atomically (a temporary file
// renamed into place) but the sidecar in place: setAttrs truncates it, then encodes JSON into
// it. A pulumi process killed between the two (SIGKILL, a crashed pod; a kill inside `stack
// init`, for one) leaves an empty sidecar, and from then on every read of the blob fails with the
// JSON decoder's "EOF": the CLI's `stack select` reports "failed to load checkpoint: EOF"
// although the checkpoint itself is whole. gocloud offers no repair, hence this function.
//
// A sidecar is torn when it is not a JSON object. Removing one loses nothing the DIY backend
// uses: fileblob reads a missing sidecar as default metadata (getAttrs), and the checkpoint,
// lock, history and backup files themselves are never touched. The places looked at are the DIY
// backend's for one stack (pkg/v3 backend/diy): stacks/<project>/<stack>.json* (with any
// organization directory in between), locks/<org>/<project>/<stack>/, history/<project>/<stack>/
// and backups/<project>/<stack>/, all under <dir>/.pulumi.
//
// An error means a directory or sidecar could not be read or a torn one not removed; the paths
// removed until then are returned with it.
func RepairSidecars(backendURL, project, stackName string) ([]string, error) {
	u, err := url.Parse(backendURL)
	if err != nil || u.Scheme != "file" {
		return nil, nil
	}
	root := filepath.Join(u.Path, ".pulumi")
	// Project and stack names hold no glob metacharacters (tokens.ValidateProjectName, Name).
	// "<stack>.json*" also matches the .bak and compressed variants, and the files of a stack
	// whose name starts with "<stack>.json"; a torn sidecar of that one is as safe to remove.
	patterns := []string{
		filepath.Join(root, "stacks", project, stackName+".json*.attrs"),
		filepath.Join(root, "stacks", "*", project, stackName+".json*.attrs"),
		filepath.Join(root, "locks", "*", project, stackName, "*.attrs"),
		filepath.Join(root, "history", project, stackName, "*.attrs"),
		filepath.Join(root, "backups", project, stackName, "*.attrs"),
	}
	var removed []string
	for _, p := range patterns {
		files, err := filepath.Glob(p)
		if err != nil {
			return removed, err
		}
		for _, f := range files {
			b, err := os.ReadFile(f)
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return removed, err
			}
			var obj map[string]any
			if json.Unmarshal(b, &obj) == nil && obj != nil {
				continue
			}
			if err := os.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return removed, err
			}
			removed = append(removed, f)
		}
	}
	return removed, nil
}
