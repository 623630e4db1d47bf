package enginehost

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"

	pkgWorkspace "github.com/pulumi/pulumi/pkg/v3/workspace"
	"github.com/pulumi/pulumi/sdk/v3/go/common/workspace"
	"gocloud.dev/blob"

	"github.com/pulumi-operator/pulumi-operator/agent/protocol"
)

// A DIY backend's lock on a stack is one JSON file per holder under
// .pulumi/locks/organization/<project>/<stack>/ (pkg/v3 backend/diy lock.go stackLockDir,
// lockContent), on every bucket the backend supports (file, PostgreSQL, S3, ...). The operator
// asks here instead of reading that layout itself: the host links the pkg/v3 that writes it.

// locks reads the locks held on stack of h's project. held is true when at least one lock file
// exists; locks lists those that parse (a lock file being written may be empty, and is a lock
// all the same). Files that vanish while they are read are skipped: a lock released meanwhile
// is no lock. An error means the lock directory could not be listed: whether a lock is held is
// then unknown.
func (h *host) locks(ctx context.Context, stack string) (held bool, locks []protocol.Lock, err error) {
	b, err := h.openBucket(ctx)
	if err != nil {
		return false, nil, err
	}
	dir := path.Join(workspace.BookkeepingDir, pkgWorkspace.LockDir, "organization", h.project, stack) + "/"
	it := b.List(&blob.ListOptions{Prefix: dir})
	for {
		obj, err := it.Next(ctx)
		if errors.Is(err, io.EOF) {
			return held, locks, nil
		}
		if err != nil {
			return false, nil, fmt.Errorf("list the stack's locks: %w", err)
		}
		if obj.IsDir || !strings.HasSuffix(obj.Key, ".json") {
			continue
		}
		data, err := b.ReadAll(ctx, obj.Key)
		if err != nil {
			continue
		}
		held = true
		var l protocol.Lock
		if json.Unmarshal(data, &l) == nil {
			locks = append(locks, l)
		}
	}
}

// unlock is OpUnlock: it removes stack's torn metadata sidecars (repairSidecars), then every
// lock on it, as `pulumi cancel` does (the DIY backend's CancelCurrentUpdate), which, unlike the
// CLI's command, needs no stack of that name: a `stack init` or `stack rm` killed while it held
// the lock leaves the lock of a stack that does not exist. It returns the sidecars removed, also
// when it fails afterwards.
func (h *host) unlock(ctx context.Context, stack string) ([]string, error) {
	if stack == "" {
		return nil, badRequest("bad unlock request: want a stack")
	}
	repaired, err := repairSidecars(h.url, h.project, stack)
	if err != nil {
		return repaired, fmt.Errorf("repair the metadata files of stack %s: %w", stack, err)
	}
	b, err := h.backend(ctx)
	if err != nil {
		return repaired, err
	}
	ref, err := b.ParseStackReference(stack)
	if err != nil {
		return repaired, fmt.Errorf("stack name %q: %w", stack, err)
	}
	if err := b.CancelCurrentUpdate(ctx, ref); err != nil {
		return repaired, fmt.Errorf("remove the locks of stack %s: %w", stack, err)
	}
	return repaired, nil
}

// repairSidecars removes the torn metadata sidecars of stack project/stackName on a file://
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
func repairSidecars(backendURL, project, stackName string) ([]string, error) {
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
