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
	"strings"
	"sync"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/cert"
)

// metricsAuth lets a request through to next only when the API server authenticates its
// bearer token (TokenReview) and authorizes its user for `get` on the request's path as a
// non-resource URL (SubjectAccessReview): what controller-runtime's metrics filters and
// kube-rbac-proxy do, written here with client-go alone (controller-runtime's filters would
// pull in k8s.io/apiserver). A missing or unknown token is 401, a user without the right 403,
// an API error 500. Decisions are cached per token (by its SHA-256) for ttl, so a scrape
// every 30 s costs two API calls a minute at most; the cache is emptied when it grows past
// maxCachedTokens.
type metricsAuth struct {
	kube kubernetes.Interface
	next http.Handler
	ttl  time.Duration

	mu    sync.Mutex
	cache map[[32]byte]authDecision
}

// authDecision is a cached answer: the HTTP status (200 lets the request through) and why.
type authDecision struct {
	code  int
	why   string
	until time.Time
}

// maxCachedTokens bounds metricsAuth's cache.
const maxCachedTokens = 1024

func newMetricsAuth(kube kubernetes.Interface, next http.Handler) *metricsAuth {
	return &metricsAuth{kube: kube, next: next, ttl: time.Minute, cache: map[[32]byte]authDecision{}}
}

func (a *metricsAuth) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || token == "" {
		w.Header().Set("WWW-Authenticate", `Bearer realm="pulumi-operator metrics"`)
		http.Error(w, "Unauthorized: send a Kubernetes bearer token (a ServiceAccount's)", http.StatusUnauthorized)
		return
	}
	d := a.decide(r.Context(), token, r.URL.Path)
	if d.code != http.StatusOK {
		http.Error(w, d.why, d.code)
		return
	}
	a.next.ServeHTTP(w, r)
}

func (a *metricsAuth) decide(ctx context.Context, token, path string) authDecision {
	key := sha256.Sum256([]byte(path + "\x00" + token))
	a.mu.Lock()
	d, ok := a.cache[key]
	a.mu.Unlock()
	if ok && time.Now().Before(d.until) {
		return d
	}
	d = a.review(ctx, token, path)
	if d.code == http.StatusInternalServerError {
		return d // not cached: the API server may answer the next time
	}
	d.until = time.Now().Add(a.ttl)
	a.mu.Lock()
	if len(a.cache) >= maxCachedTokens {
		a.cache = map[[32]byte]authDecision{}
	}
	a.cache[key] = d
	a.mu.Unlock()
	return d
}

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
// in dir (e.g. a mounted Secret of cert-manager), else a self-signed one made at start, which
// scrapers accept with insecureSkipVerify (the token is then still only sent over TLS).
// Errors: a dir without a readable pair.
func metricsTLS(dir string) (*tls.Config, error) {
	var pair tls.Certificate
	var err error
	if dir != "" {
		pair, err = tls.LoadX509KeyPair(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"))
		if err != nil {
			return nil, fmt.Errorf("--metrics-cert-dir %s: want tls.crt and tls.key: %w", dir, err)
		}
	} else {
		host, _ := os.Hostname()
		crt, key, gerr := cert.GenerateSelfSignedCertKey(host, nil, []string{"localhost"})
		if gerr != nil {
			return nil, fmt.Errorf("self-signed certificate for --metrics-secure: %w", gerr)
		}
		pair, err = tls.X509KeyPair(crt, key)
		if err != nil {
			return nil, err
		}
	}
	return &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}, nil
}
