package enginehost

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/pulumi/pulumi/pkg/v3/backend/diy"
	"gocloud.dev/blob"
)

// Every update of a DIY backend writes, per stack, a history entry (an update record and a copy
// of the checkpoint) under .pulumi/history/<project>/<stack>/ and a copy of the checkpoint under
// .pulumi/backups/<project>/<stack>/ (pkg/v3 backend/diy state.go addToHistory, backupStack),
// and nothing ever removes them while the stack lives: an object retried all day would fill
// the operator's volume. prune keeps the newest of each. No Pulumi setting bounds the history
// (PULUMI_DIY_BACKEND_DISABLE_CHECKPOINT_BACKUPS turns the backups off, and the operator sets
// it; PULUMI_DIY_BACKEND_RETAIN_CHECKPOINTS only adds copies), so this is the one place where
// the operator deletes backend files itself: the engine host's OpPrune, also as the CLI's
// protocol.RequestCommand (RequestMain) where no engine host runs.
//
// "Newest" is Pulumi's own order: the update time each file's name carries, which is how
// `pulumi stack history` and the backend's latest configuration (diy state.go getHistory:
// keys sorted by name) find the newest updates. A file's modification time plays no part: a
// copied or restored backend keeps the names, not the times.

// openBucket opens the backend's bucket the way pkg/v3's DIY backend opens it (backend/diy
// backend.go newDIYBackend: a file:// URL with no_tmp_dir, a sub-path of any other URL as a
// prefix), with the drivers that package registers (file, s3, gs, azblob, postgres).
func openBucket(ctx context.Context, raw string) (*blob.Bucket, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("backend URL: %w", err)
	}
	if u.Scheme == "file" {
		q := u.Query()
		if q.Get("no_tmp_dir") == "" {
			q.Set("no_tmp_dir", "true")
		}
		u.RawQuery = q.Encode()
		return blob.OpenBucket(ctx, u.String())
	}
	b, err := blob.OpenBucket(ctx, raw)
	if err != nil {
		return nil, err
	}
	// Every scheme but file's, postgres:// included: there the path is the database's name, and
	// pkg/v3 puts it before each key all the same ("<db>/.pulumi/...").
	if sub := strings.TrimLeft(u.Path, "/"); sub != "" {
		return blob.PrefixedBucket(b, strings.TrimSuffix(sub, "/")+"/"), nil
	}
	return b, nil
}

// prune keeps the keep newest updates of stack in the history and the backups of h's project
// (keep < 1 keeps all) and returns how many files it deleted.
func (h *host) prune(ctx context.Context, stack string, keep int) (int, error) {
	if keep < 1 {
		return 0, nil
	}
	b, err := h.openBucket(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, dir := range []string{diy.HistoriesDir, diy.BackupsDir} {
		d, err := pruneDir(ctx, b, path.Join(dir, h.project, stack), stack, keep)
		n += d
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// openBucket is h's bucket, opened once.
func (h *host) openBucket(ctx context.Context) (*blob.Bucket, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.bucket == nil {
		b, err := openBucket(ctx, h.url)
		if err != nil {
			return nil, fmt.Errorf("open the backend's bucket: %w", err)
		}
		h.bucket = b
	}
	return h.bucket, nil
}

// pruneDir deletes, from dir, the files of every update of stack but the keep newest. A file
// belongs to the update whose time (Unix nanoseconds) its name carries: "<stack>-<time>.history.
// json", "<stack>-<time>.checkpoint.json" (history) or "<stack>.<time>.json" (backups), each
// possibly compressed (.gz, .zst). Files that carry no such time are left alone.
func pruneDir(ctx context.Context, b *blob.Bucket, dir, stack string, keep int) (int, error) {
	byTime := map[int64][]string{}
	it := b.List(&blob.ListOptions{Prefix: dir + "/"})
	for {
		obj, err := it.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return 0, fmt.Errorf("list %s: %w", dir, err)
		}
		if obj.IsDir {
			continue
		}
		if t, ok := updateTime(path.Base(obj.Key), stack); ok {
			byTime[t] = append(byTime[t], obj.Key)
		}
	}
	times := make([]int64, 0, len(byTime))
	for t := range byTime {
		times = append(times, t)
	}
	slices.Sort(times)
	n := 0
	for _, t := range times[:max(0, len(times)-keep)] {
		for _, key := range byTime[t] {
			if err := b.Delete(ctx, key); err != nil {
				return n, fmt.Errorf("delete %s: %w", key, err)
			}
			n++
		}
	}
	return n, nil
}

// updateTime reads the update time out of a history or backup file name of stack (see
// pruneDir); false when the name carries none.
func updateTime(name, stack string) (int64, bool) {
	rest, ok := strings.CutPrefix(name, stack)
	if !ok || rest == "" || (rest[0] != '-' && rest[0] != '.') {
		return 0, false
	}
	digits, _, _ := strings.Cut(rest[1:], ".")
	t, err := strconv.ParseInt(digits, 10, 64)
	return t, err == nil
}
