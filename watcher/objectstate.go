package watcher

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

// objectState is what this process remembers of one KindCustomHttp between its reconciles, kept
// per namespace/name in objectStates until Watcher.forget drops it (the informer shows the object
// gone). Most fields cover the time until the informer shows what this process wrote; the rest
// cache work that an unchanged object does not need again. The zero value is an object this
// process knows nothing of.
type objectState struct {
	// applied is what the last successful up applied (plan): a cache copy without that up's
	// status write must not start a second up. Zero while an up runs.
	applied applied
	// handledRequest is the reconcile-request annotation value last acted on, for the same reason.
	handledRequest string
	// lastRefresh is when the last paced up (plan.paced: drift repair, reconcile request)
	// started (Options.MinRefreshInterval).
	lastRefresh time.Time
	// destroyed is the UID whose stack was destroyed and finalizer removed: a delivery of the
	// object from before the finalizer's removal must not destroy again (that destroy finds no
	// stack, and its lock sweep would create and remove the stack once more).
	destroyed types.UID
	// stackGone is the UID whose stack this process destroyed (or found missing and was allowed
	// to leave) while the objects it deleted may still be going: the next reconciles of the
	// delete wait for them without another destroy.
	stackGone types.UID
	// terminatingSince is when this process first found the delete waiting for the objects its
	// destroy deleted (waitTerminating), to tell a wait from a blocked delete.
	terminatingSince waitingSince
	// converted is the object's last conversion to the typed form (Watcher.object): a resync,
	// which hands the same resourceVersion again, converts nothing.
	converted conversion
	// specDigest is the digest of the spec's last version (versionDigest).
	specDigest versionDigest
}

// objectStates holds an objectState per object (cache.ObjectName), safe for concurrent use. A
// key's reconciles never overlap (the workqueue hands a key to one worker at a time), but the
// metrics and the informer's handlers may read beside them.
type objectStates struct {
	mu sync.Mutex
	m  map[cache.ObjectName]*objectState
}

// get returns a copy of key's state: the zero value for an object this process knows nothing of.
func (s *objectStates) get(key cache.ObjectName) objectState {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.m[key]; st != nil {
		return *st
	}
	return objectState{}
}

// update changes key's state with change, made under the lock (a check and a set in one step).
func (s *objectStates) update(key cache.ObjectName, change func(*objectState)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.m[key]
	if st == nil {
		if s.m == nil {
			s.m = map[cache.ObjectName]*objectState{}
		}
		st = &objectState{}
		s.m[key] = st
	}
	change(st)
}

// forget drops key's state.
func (s *objectStates) forget(key cache.ObjectName) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, key)
}
