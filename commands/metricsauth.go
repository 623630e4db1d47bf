package commands

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/semaphore"
	"golang.org/x/sync/singleflight"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/cert"

	"github.com/pulumi-operator/pulumi-operator/internal/kubeclient"
)

// The limits of --metrics-secure's reviews. Anyone who reaches the metrics port can make the
// operator ask the API server about a token, so what a caller can cost is bounded four ways:
// the reviews have a client of their own (newMetricsReviewClient) whose rate limit is not the
// one the leader election and the workers draw on, identical tokens share one review, at most
// maxConcurrentReviews run at once, and decisions are cached in two LRUs so that tokens the API
// server rejects never push out the ones it accepted.
const (
	// metricsReviewQPS and metricsReviewBurst are the reviews' client-go rate limit, in API
	// requests per second and at once. A scraper's token costs 2 requests (TokenReview,
	// SubjectAccessReview) per metricsDecisionTTL: a Prometheus pair costs 4 a minute, far
	// below it; a flood of unknown tokens costs the API server at most this.
	metricsReviewQPS   = 5
	metricsReviewBurst = 10
	// metricsReviewTimeout bounds each review request (rest.Config.Timeout) and one whole
	// review (both requests), so a slow API server cannot hold a review slot longer.
	metricsReviewTimeout = 5 * time.Second
	// maxConcurrentReviews is how many distinct tokens are under review at once. More would
	// only wait in the client's rate limiter: 4 slots at 5 requests a second drain within a
	// second.
	maxConcurrentReviews = 4
	// metricsReviewWait is how long a request whose token needs a review waits for a slot;
	// then it is answered 503 Service Unavailable with Retry-After (the operator is too busy
	// to check tokens, through no fault of the caller's: not 429). A scrape whose decision is
	// cached never waits.
	metricsReviewWait = time.Second
	// metricsRetryAfter is the Retry-After of that 503, in seconds: long enough for the
	// reviews' rate limit to refill its burst.
	metricsRetryAfter = 2
	// metricsDecisionTTL is how long a decision is reused: a scrape every 30 s costs one review
	// a minute, and a revoked right or token is honoured within a minute.
	metricsDecisionTTL = time.Minute
	// maxAllowedTokens bounds the cache of accepted tokens: only tokens the API server
	// authenticated and authorized get in, so it holds the real scrapers (a few).
	maxAllowedTokens = 256
	// maxDeniedTokens bounds the cache of rejected tokens (401, 403), an entry ~150 bytes: a
	// flood of distinct bad tokens rolls it over without touching maxAllowedTokens' cache.
	maxDeniedTokens = 4096
	// maxTokenBytes: a longer bearer token is rejected unreviewed. Kubernetes tokens (JWTs of
	// ServiceAccounts and OIDC providers) are 1-4 KiB; the server accepts headers up to 1 MiB,
	// which would otherwise be sent on to the API server.
	maxTokenBytes = 16 << 10
)

// metricsAuth lets a request through to next only when the API server authenticates its
// bearer token (TokenReview) and authorizes its user for `get` on the request's path as a
// non-resource URL (SubjectAccessReview): what controller-runtime's metrics filters and
// kube-rbac-proxy do, written here with client-go alone (controller-runtime's filters would
// pull in k8s.io/apiserver, whose cached authenticators are what they wrap). A missing,
// unknown or oversized token is 401, a user without the right 403, an API error 500 (not
// cached), no free review slot within metricsReviewWait 503 with Retry-After (not cached).
// The limits are the constants above; tests lower them through the fields.
type metricsAuth struct {
	kube kubeclient.Interface // the reviews' own client (newMetricsReviewClient)
	next http.Handler
	ttl  time.Duration // how long a decision is cached
	wait time.Duration // how long a request waits for a review slot

	// allowed and denied cache decisions (authDecision) by the SHA-256 of path and token, as a
	// string; each is an LRU with per-entry expiry, safe for concurrent use.
	allowed, denied *cache.LRUExpireCache
	slots           *semaphore.Weighted // review slots, FIFO
	reviews         singleflight.Group  // one review per key at a time, shared by its callers
}

// authDecision is an answer: the HTTP status (200 lets the request through) and why.
type authDecision struct {
	code int
	why  string
}

var metricsBusy = authDecision{code: http.StatusServiceUnavailable,
	why: "Service Unavailable: too many tokens under review, retry later"}

// newMetricsAuth guards next with reviews made through kube (newMetricsReviewClient's client
// in `watch`), with the limits above.
func newMetricsAuth(kube kubeclient.Interface, next http.Handler) *metricsAuth {
	return &metricsAuth{
		kube: kube, next: next, ttl: metricsDecisionTTL, wait: metricsReviewWait,
		allowed: cache.NewLRUExpireCache(maxAllowedTokens),
		denied:  cache.NewLRUExpireCache(maxDeniedTokens),
		slots:   semaphore.NewWeighted(maxConcurrentReviews),
	}
}

// newMetricsReviewConfig is a copy of rc, the main client's configuration, for the reviews:
// its own rate limiter (metricsReviewQPS, metricsReviewBurst; rc's RateLimiter, if any, is not
// shared) and timeout, and a user agent that tells its requests apart in the API server's
// audit log.
func newMetricsReviewConfig(rc *rest.Config) *rest.Config {
	c := rest.CopyConfig(rc)
	c.RateLimiter = nil // NewForConfig makes one from QPS and Burst
	c.QPS, c.Burst = metricsReviewQPS, metricsReviewBurst
	c.Timeout = metricsReviewTimeout
	c.UserAgent = strings.TrimSpace(rc.UserAgent + " metrics-auth")
	return c
}

// newMetricsReviewClient is the client of --metrics-secure's reviews (newMetricsReviewConfig),
// built from the main client's configuration rc.
func newMetricsReviewClient(rc *rest.Config) (kubeclient.Interface, error) {
	kube, err := kubeclient.NewForConfig(newMetricsReviewConfig(rc))
	if err != nil {
		return nil, fmt.Errorf("create Kubernetes client for metrics token reviews: %w", err)
	}
	return kube, nil
}

func (a *metricsAuth) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || token == "" || len(token) > maxTokenBytes {
		w.Header().Set("WWW-Authenticate", `Bearer realm="pulumi-operator metrics"`)
		http.Error(w, "Unauthorized: send a Kubernetes bearer token (a ServiceAccount's)", http.StatusUnauthorized)
		return
	}
	d := a.decide(r.Context(), token, r.URL.Path)
	if d.code == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", strconv.Itoa(metricsRetryAfter))
	}
	if d.code != http.StatusOK {
		http.Error(w, d.why, d.code)
		return
	}
	a.next.ServeHTTP(w, r)
}

// decide answers from the caches, else joins or starts the one review of this token and path.
// A caller whose request ends while it waits gets metricsBusy; the review goes on for the others.
func (a *metricsAuth) decide(ctx context.Context, token, path string) authDecision {
	sum := sha256.Sum256([]byte(path + "\x00" + token))
	key := string(sum[:])
	if d, ok := a.allowed.Get(key); ok {
		return d.(authDecision)
	}
	if d, ok := a.denied.Get(key); ok {
		return d.(authDecision)
	}
	ch := a.reviews.DoChan(key, func() (any, error) { return a.reviewAndCache(key, token, path), nil })
	select {
	case res := <-ch:
		return res.Val.(authDecision)
	case <-ctx.Done():
		return metricsBusy
	}
}

// reviewAndCache waits up to a.wait for a review slot (metricsBusy if none frees), reviews,
// and caches a 200, 401 or 403. It runs once per key at a time (singleflight) and outlives the
// request that started it, so its contexts are its own.
func (a *metricsAuth) reviewAndCache(key, token, path string) authDecision {
	wctx, cancel := context.WithTimeout(context.Background(), a.wait)
	err := a.slots.Acquire(wctx, 1)
	cancel()
	if err != nil {
		return metricsBusy
	}
	defer a.slots.Release(1)
	rctx, cancel := context.WithTimeout(context.Background(), metricsReviewTimeout)
	defer cancel()
	d := a.review(rctx, token, path)
	switch d.code {
	case http.StatusOK:
		a.allowed.Add(key, d, a.ttl)
	case http.StatusUnauthorized, http.StatusForbidden:
		a.denied.Add(key, d, a.ttl)
	}
	return d
}

// review asks the API server about token: TokenReview, then SubjectAccessReview for `get`
// on path. API errors are 500.
func (a *metricsAuth) review(ctx context.Context, token, path string) authDecision {
	tr, err := a.kube.AuthenticationV1().TokenReviews().Create(ctx, &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		slog.Error("metrics: TokenReview failed", "err", err)
		return authDecision{code: http.StatusInternalServerError, why: "Internal Server Error: cannot review the token"}
	}
	if !tr.Status.Authenticated {
		return authDecision{code: http.StatusUnauthorized, why: "Unauthorized: the API server does not accept this token"}
	}
	u := tr.Status.User
	extra := map[string]authzv1.ExtraValue{}
	for k, v := range u.Extra {
		extra[k] = authzv1.ExtraValue(v)
	}
	sar, err := a.kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
		User: u.Username, Groups: u.Groups, UID: u.UID, Extra: extra,
		NonResourceAttributes: &authzv1.NonResourceAttributes{Path: path, Verb: "get"},
	}}, metav1.CreateOptions{})
	if err != nil {
		slog.Error("metrics: SubjectAccessReview failed", "err", err)
		return authDecision{code: http.StatusInternalServerError, why: "Internal Server Error: cannot review the access"}
	}
	if !sar.Status.Allowed {
		return authDecision{code: http.StatusForbidden, why: fmt.Sprintf("Forbidden: %s may not get %s (grant the non-resource URL, e.g. ClusterRole <release>-metrics-reader)", u.Username, path)}
	}
	return authDecision{code: http.StatusOK}
}

// metricsTLS is the TLS configuration of --metrics-secure: the key pair tls.crt and tls.key
// in dir (e.g. a mounted Secret of cert-manager, or the chart's own, which the ServiceMonitor
// verifies by its CA), read again whenever either file changes (certPair), so a renewed
// certificate is served without a restart; else a self-signed one made at start (a scraper
// then has no CA to verify it by). Errors: a dir without a readable pair at start.
func metricsTLS(dir string) (*tls.Config, error) {
	if dir != "" {
		p := &certPair{dir: dir}
		if _, err := p.get(nil); err != nil {
			return nil, fmt.Errorf("--metrics-cert-dir %s: want tls.crt and tls.key: %w", dir, err)
		}
		return &tls.Config{GetCertificate: p.get, MinVersion: tls.VersionTLS12}, nil
	}
	host, _ := os.Hostname()
	crt, key, err := cert.GenerateSelfSignedCertKey(host, nil, []string{"localhost"})
	if err != nil {
		return nil, fmt.Errorf("self-signed certificate for --metrics-secure: %w", err)
	}
	pair, err := tls.X509KeyPair(crt, key)
	if err != nil {
		return nil, err
	}
	return &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}, nil
}

// certPair is the key pair tls.crt and tls.key of a directory, read again when either file's
// modification time or size changes (the kubelet updates a mounted Secret by swapping a
// symlink; cert-manager renews a certificate weeks before it expires). A pair that no longer
// loads (a half-written update) keeps the last good one, logged.
type certPair struct {
	dir string

	mu    sync.Mutex
	stamp string // the files' modification times and sizes when pair was read
	pair  *tls.Certificate
}

// get is tls.Config.GetCertificate: the current pair, read again if the files changed.
// Errors: only when no pair was ever read.
func (p *certPair) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	crt, key := filepath.Join(p.dir, "tls.crt"), filepath.Join(p.dir, "tls.key")
	var stamp strings.Builder
	for _, f := range []string{crt, key} {
		if st, err := os.Stat(f); err == nil {
			fmt.Fprintf(&stamp, "%d/%d;", st.ModTime().UnixNano(), st.Size())
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pair != nil && stamp.String() == p.stamp {
		return p.pair, nil
	}
	pair, err := tls.LoadX509KeyPair(crt, key)
	if err != nil {
		if p.pair != nil {
			slog.Warn("metrics certificate changed but does not load; serving the previous one", "dir", p.dir, "error", err)
			p.stamp = stamp.String()
			return p.pair, nil
		}
		return nil, err
	}
	p.pair, p.stamp = &pair, stamp.String()
	return p.pair, nil
}
