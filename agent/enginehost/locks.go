package enginehost

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"

	pkgWorkspace "github.com/pulumi/pulumi/pkg/v3/workspace"
	"github.com/pulumi/pulumi/sdk/v3/go/common/workspace"
	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"

	"github.com/pulumi-operator/pulumi-operator/agent/protocol"
	"github.com/pulumi-operator/pulumi-operator/agent/protocol/diyfile"
)

// A DIY backend's lock on a stack is one JSON file per holder under
// .pulumi/locks/organization/<project>/<stack>/ (pkg/v3 backend/diy lock.go stackLockDir,
// lockContent), on every bucket the backend supports (file, PostgreSQL, S3, ...). The operator
// asks here instead of reading that layout itself: the host links the pkg/v3 that writes it.

// locks reads the locks held on stack of h's project, or on every stack of it when stack is "".
// held is true when at least one lock file exists; locks lists those that parse, each with its ID
// (the file's name) and, for every stack, its stack (a lock file being written may be empty, and
// is a lock all the same). Files that vanish while they are read are skipped: a lock released
// meanwhile is no lock. An error means the lock directory could not be listed: whether a lock is
// held is then unknown.
func (h *host) locks(ctx context.Context, stack string) (held bool, locks []protocol.Lock, err error) {
	b, err := h.openBucket(ctx)
	if err != nil {
		return false, nil, err
	}
	root := path.Join(workspace.BookkeepingDir, pkgWorkspace.LockDir, "organization", h.project) + "/"
	dir := root
	if stack != "" {
		dir = path.Join(root, stack) + "/"
	}
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
			l.ID = strings.TrimSuffix(path.Base(obj.Key), ".json")
			if stack == "" {
				l.Stack = path.Dir(strings.TrimPrefix(obj.Key, root))
			}
			locks = append(locks, l)
		}
	}
}

// unlock is OpUnlock: it removes stack's torn metadata sidecars (diyfile.RepairSidecars), then the
// locks ids names (exactly those lock files: a lock taken since the caller judged them stays), or
// every lock on it when ids is empty, as `pulumi cancel` does (the DIY backend's
// CancelCurrentUpdate), which, unlike the CLI's command, needs no stack of that name: a `stack
// init` or `stack rm` killed while it held the lock leaves the lock of a stack that does not
// exist. It returns the sidecars removed, also when it fails afterwards. A lock already gone is
// no error.
func (h *host) unlock(ctx context.Context, stack string, ids []string) ([]string, error) {
	if stack == "" {
		return nil, badRequest("bad unlock request: want a stack")
	}
	for _, id := range ids {
		if id == "" || strings.ContainsAny(id, "/\\") || id == "." || id == ".." {
			return nil, badRequest("bad unlock request: lock id %q", id)
		}
	}
	repaired, err := diyfile.RepairSidecars(h.url, h.project, stack)
	if err != nil {
		return repaired, fmt.Errorf("repair the metadata files of stack %s: %w", stack, err)
	}
	if len(ids) > 0 {
		b, err := h.openBucket(ctx)
		if err != nil {
			return repaired, err
		}
		dir := path.Join(workspace.BookkeepingDir, pkgWorkspace.LockDir, "organization", h.project, stack)
		for _, id := range ids {
			if err := b.Delete(ctx, path.Join(dir, id+".json")); err != nil && gcerrors.Code(err) != gcerrors.NotFound {
				return repaired, fmt.Errorf("remove lock %s of stack %s: %w", id, stack, err)
			}
		}
		return repaired, nil
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
