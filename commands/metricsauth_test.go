package commands

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/pulumi-operator/pulumi-operator/internal/testenv"
)

// When the API server cannot review a token or an access (down, or the operator lacks the
// right to create TokenReviews / SubjectAccessReviews), a scrape gets 500 and the answer is
// not cached: the next scrape asks again. A fake clientset forces the failures, which a
// working API server does not produce on demand.
func TestMetricsAuthAPIErrors(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("metrics")) })
	scrape := func(a *metricsAuth) int {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
		req.Header.Set("Authorization", "Bearer t")
		a.ServeHTTP(rec, req)
		return rec.Code
	}

	kube := fake.NewClientset()
	reviews := 0
	kube.PrependReactor("create", "tokenreviews", func(k8stesting.Action) (bool, runtime.Object, error) {
		reviews++
		return true, nil, errors.New("connection refused")
	})
	a := newMetricsAuth(kube, ok)
	if code := scrape(a); code != http.StatusInternalServerError {
		t.Fatalf("TokenReview error: %d, want 500", code)
	}
	if scrape(a); reviews != 2 {
		t.Fatalf("%d TokenReviews for two scrapes, want 2 (an API error is not cached)", reviews)
	}

	kube = fake.NewClientset()
	kube.PrependReactor("create", "tokenreviews", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, &authnv1.TokenReview{Status: authnv1.TokenReviewStatus{Authenticated: true, User: authnv1.UserInfo{Username: "u"}}}, nil
	})
	kube.PrependReactor("create", "subjectaccessreviews", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("forbidden: cannot create subjectaccessreviews")
	})
	if code := scrape(newMetricsAuth(kube, ok)); code != http.StatusInternalServerError {
		t.Fatalf("SubjectAccessReview error: %d, want 500", code)
	}
}

// The reviews' client is a copy of the main one with a rate limiter of its own: the main
// client's configuration (and so its limiter, which renews the Lease) is left as it was.
func TestMetricsReviewConfig(t *testing.T) {
	mainLimiter := flowcontrol.NewTokenBucketRateLimiter(50, 300)
	rc := &rest.Config{Host: "https://127.0.0.1:6443", QPS: 50, Burst: 300, UserAgent: "pulumi-operator", RateLimiter: mainLimiter}
	c := newMetricsReviewConfig(rc)
	if c.RateLimiter != nil || c.QPS != metricsReviewQPS || c.Burst != metricsReviewBurst || c.Timeout != metricsReviewTimeout {
		t.Errorf("reviews' config: limiter %v, QPS %v, burst %d, timeout %s; want its own limiter (nil: made from) QPS %v, burst %d, timeout %s",
			c.RateLimiter, c.QPS, c.Burst, c.Timeout, metricsReviewQPS, metricsReviewBurst, metricsReviewTimeout)
	}
	if c.UserAgent != "pulumi-operator metrics-auth" || c.Host != rc.Host {
		t.Errorf("reviews' config: user agent %q, host %q", c.UserAgent, c.Host)
	}
	if rc.RateLimiter != mainLimiter || rc.QPS != 50 || rc.Burst != 300 || rc.Timeout != 0 || rc.UserAgent != "pulumi-operator" {
		t.Errorf("the main config changed: %+v", rc)
	}
}

// reviewAPI is an API server that answers TokenReviews and SubjectAccessReviews only, for the
// unit tests below that need the answers held back or counted per token, which the real API
// server cannot do on demand. Token "good" is user "scraper", allowed to get anything; every
// other token is not authenticated.
type reviewAPI struct {
	hold chan struct{} // when not nil, each TokenReview is answered only once it is closed

	mu          sync.Mutex
	perToken    map[string]int // TokenReviews by token
	inFlight    int            // TokenReviews being answered now
	maxInFlight int
}

func (s *reviewAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	switch {
	case strings.HasSuffix(r.URL.Path, "/tokenreviews"):
		var tr authnv1.TokenReview
		if err := json.NewDecoder(r.Body).Decode(&tr); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		s.perToken[tr.Spec.Token]++
		s.inFlight++
		s.maxInFlight = max(s.maxInFlight, s.inFlight)
		s.mu.Unlock()
		if s.hold != nil {
			<-s.hold
		}
		s.mu.Lock()
		s.inFlight--
		s.mu.Unlock()
		if tr.Spec.Token == "good" {
			tr.Status = authnv1.TokenReviewStatus{Authenticated: true, User: authnv1.UserInfo{Username: "scraper"}}
		}
		_ = json.NewEncoder(w).Encode(&tr)
	case strings.HasSuffix(r.URL.Path, "/subjectaccessreviews"):
		var sar authzv1.SubjectAccessReview
		if err := json.NewDecoder(r.Body).Decode(&sar); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		sar.Status.Allowed = sar.Spec.User == "scraper"
		_ = json.NewEncoder(w).Encode(&sar)
	default:
		http.NotFound(w, r)
	}
}

func (s *reviewAPI) reviews(token string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.perToken[token]
}

func (s *reviewAPI) total() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.perToken {
		n += c
	}
	return n
}

// startReviewAPI serves api and returns a metricsAuth reviewing through it with the limits of
// `watch`, but a client whose rate limit never throttles: these tests are about the handler's
// own bounds.
func startReviewAPI(t *testing.T, api *reviewAPI) *metricsAuth {
	t.Helper()
	api.perToken = map[string]int{}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	t.Cleanup(func() {
		if api.hold != nil {
			select {
			case <-api.hold:
			default:
				close(api.hold)
			}
		}
	})
	kube, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL, QPS: 10000, Burst: 10000,
		ContentConfig: rest.ContentConfig{ContentType: "application/json"}})
	if err != nil {
		t.Fatal(err)
	}
	return newMetricsAuth(kube, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("metrics")) }))
}

// authGet sends one request with token to a and returns the response.
func authGet(a http.Handler, token string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	a.ServeHTTP(rec, req)
	return rec
}

// At most maxConcurrentReviews tokens are under review at once; requests beyond wait for a
// slot, then get 503 with Retry-After, uncached.
func TestMetricsAuthBoundsConcurrentReviews(t *testing.T) {
	api := &reviewAPI{hold: make(chan struct{})}
	a := startReviewAPI(t, api)
	a.wait = 300 * time.Millisecond
	const n = 3 * maxConcurrentReviews
	type answer struct {
		code       int
		retryAfter string
	}
	answers := make(chan answer, n)
	for i := range n {
		go func() {
			rec := authGet(a, fmt.Sprintf("bad-%d", i))
			answers <- answer{rec.Code, rec.Header().Get("Retry-After")}
		}()
	}
	// Those that found no slot answer after a.wait, while the others' reviews are held.
	for range n - maxConcurrentReviews {
		select {
		case got := <-answers:
			if got.code != http.StatusServiceUnavailable || got.retryAfter != fmt.Sprint(metricsRetryAfter) {
				t.Errorf("a request beyond the slots: %d, Retry-After %q; want 503, %d", got.code, got.retryAfter, metricsRetryAfter)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("requests beyond the review slots did not give up")
		}
	}
	close(api.hold)
	for range maxConcurrentReviews {
		if got := <-answers; got.code != http.StatusUnauthorized {
			t.Errorf("a reviewed bad token: %d, want 401", got.code)
		}
	}
	if api.maxInFlight != maxConcurrentReviews || api.total() != maxConcurrentReviews {
		t.Errorf("%d TokenReviews at once, %d in all; want %d and %d", api.maxInFlight, api.total(), maxConcurrentReviews, maxConcurrentReviews)
	}
	// A 503 is not cached: the same token is reviewed once a slot is free.
	if rec := authGet(a, "bad-0"); rec.Code != http.StatusUnauthorized {
		t.Errorf("bad-0 again: %d, want 401", rec.Code)
	}
}

// A flood of distinct bad tokens, twice as many as the cache of rejected tokens holds, leaves
// the decision on a good token cached: it is not reviewed again. The flood's own tokens are
// cached too, as far as their LRU goes: its newest are not reviewed twice, its oldest are.
func TestMetricsAuthFloodKeepsGoodToken(t *testing.T) {
	api := &reviewAPI{}
	a := startReviewAPI(t, api)
	if rec := authGet(a, "good"); rec.Code != http.StatusOK || rec.Body.String() != "metrics" {
		t.Fatalf("good token: %d %q", rec.Code, rec.Body.String())
	}
	const flood, workers = 2 * maxDeniedTokens, 8
	var next atomic.Int64
	var wrong atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < flood; i = next.Add(1) - 1 {
				if authGet(a, fmt.Sprintf("bad-%d", i)).Code != http.StatusUnauthorized {
					wrong.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if wrong.Load() != 0 || api.total() != flood+1 {
		t.Fatalf("flood: %d answers not 401, %d TokenReviews; want 0 and %d", wrong.Load(), api.total(), flood+1)
	}
	if rec := authGet(a, "good"); rec.Code != http.StatusOK || api.reviews("good") != 1 {
		t.Errorf("good token after the flood: %d, reviewed %d times; want 200, once (cached)", rec.Code, api.reviews("good"))
	}
	newest, oldest := fmt.Sprintf("bad-%d", flood-1), "bad-0"
	authGet(a, newest)
	authGet(a, oldest)
	if api.reviews(newest) != 1 || api.reviews(oldest) != 2 {
		t.Errorf("newest flood token reviewed %d times, oldest %d; want 1 (cached) and 2 (evicted)", api.reviews(newest), api.reviews(oldest))
	}
}

// Concurrent requests with one token share one review.
func TestMetricsAuthSharesOneReview(t *testing.T) {
	api := &reviewAPI{hold: make(chan struct{})}
	a := startReviewAPI(t, api)
	const n = 50
	codes := make(chan int, n)
	for range n {
		go func() { codes <- authGet(a, "same-bad-token").Code }()
	}
	if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return api.total() > 0, nil
	}); err != nil {
		t.Fatal("no TokenReview arrived")
	}
	time.Sleep(200 * time.Millisecond) // the other requests join the review under way
	close(api.hold)
	for range n {
		if code := <-codes; code != http.StatusUnauthorized {
			t.Errorf("answer %d, want 401", code)
		}
	}
	if got := api.reviews("same-bad-token"); got != 1 {
		t.Errorf("%d TokenReviews for %d concurrent requests with one token, want 1", got, n)
	}
}

// --- A flood of bad tokens against the real API server --------------------------------------

// apiRecorder wraps a client's transport and records, from the API server's answers, when the
// Lease was renewed (a successful update) and when a TokenReview was answered.
type apiRecorder struct {
	mu       sync.Mutex
	renewals []time.Time
	reviews  []time.Time
}

func (r *apiRecorder) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(req)
		if err != nil {
			return resp, err
		}
		now := time.Now()
		r.mu.Lock()
		defer r.mu.Unlock()
		switch {
		case req.Method == http.MethodPut && strings.Contains(req.URL.Path, "/leases/") && resp.StatusCode == http.StatusOK:
			r.renewals = append(r.renewals, now)
		case req.Method == http.MethodPost && strings.HasSuffix(req.URL.Path, "/tokenreviews"):
			r.reviews = append(r.reviews, now)
		}
		return resp, nil
	})
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// floodResult is what a flood of bad tokens did to the leader election and the API server.
type floodResult struct {
	elapsed     time.Duration
	codes       map[int]int   // answers to the flood by status; 0: no answer (timed out)
	maxRenewGap time.Duration // longest time without a Lease renewal while the flood ran
	maxMainGet  time.Duration // slowest GET of the Lease through the main client during the flood
	mainErrs    []string      // errors of those GETs
	lost        bool          // the leader stopped leading during the flood
	reviews     int           // TokenReviews the API server answered during the flood
	goodCodes   []int         // answers to a scraper with a good token, once a second
}

func (f floodResult) String() string {
	return fmt.Sprintf("%s: answers %v; longest renewal gap %s, slowest main-client GET %s (errors %q), lost %v; %d TokenReviews; good scrapes %v",
		f.elapsed.Round(time.Millisecond), f.codes, f.maxRenewGap.Round(time.Millisecond), f.maxMainGet.Round(time.Millisecond), f.mainErrs,
		f.lost, f.reviews, f.goodCodes)
}

// The flood: at most floodRequests distinct bad tokens, floodWorkers at a time, for at most
// floodLimit; the leader election has `watch`'s default durations.
const (
	floodRequests = 2000
	floodWorkers  = 32
	floodLimit    = 20 * time.Second
	floodLease    = 15 * time.Second
	floodRenew    = 10 * time.Second
	floodRetry    = 2 * time.Second
)

// metricsReaderToken is the token of a new ServiceAccount of ns bound to a ClusterRole that
// grants `get` on /metrics, as the chart's <release>-metrics-reader does.
func metricsReaderToken(t *testing.T, c *testenv.Cluster, ns string) string {
	t.Helper()
	ctx := context.Background()
	tok := saToken(t, c, ns, "scraper")
	role := "metrics-reader-" + ns
	if _, err := c.Kube.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: role},
		Rules: []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Kube.RbacV1().ClusterRoles().Delete(context.Background(), role, metav1.DeleteOptions{}) })
	if _, err := c.Kube.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "scraper", Namespace: ns}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Kube.RbacV1().ClusterRoleBindings().Delete(context.Background(), role, metav1.DeleteOptions{})
	})
	return tok
}

// runLeaseFlood builds the main client as `watch` does (restConfig with --kube-api-qps qps and
// --kube-api-burst burst), leads a Lease of ns with it as watcher.RunLeaderElected does, serves
// guard(rc, main)(the metrics) over TLS on 127.0.0.1 as `watch --metrics-secure` does, and
// floods it with bad tokens while a scraper with goodToken scrapes once a second and the Lease
// is read through the main client once a second. rc records renewals and TokenReviews, also
// in the clients guard makes from it.
func runLeaseFlood(t *testing.T, c *testenv.Cluster, ns string, qps float64, burst int, goodToken string,
	guard func(rc *rest.Config, main kubernetes.Interface) http.Handler) floodResult {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rec := &apiRecorder{}
	rc, err := restConfig(&config{kubeconfig: c.Kubeconfig, kubeQPS: qps, kubeBurst: burst})
	if err != nil {
		t.Fatal(err)
	}
	rc.Wrap(rec.wrap)
	main, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}

	const leaseName = "metrics-flood"
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, ns, leaseName, main.CoreV1(), main.CoordinationV1(),
		resourcelock.ResourceLockConfig{Identity: "flood-test"})
	if err != nil {
		t.Fatal(err)
	}
	leading := make(chan struct{})
	var flooding, lost atomic.Bool
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: lock, LeaseDuration: floodLease, RenewDeadline: floodRenew, RetryPeriod: floodRetry, ReleaseOnCancel: true, Name: leaseName,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(context.Context) { close(leading) },
			OnStoppedLeading: func() { lost.Store(flooding.Load()) },
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	electing, stopElecting := context.WithCancel(ctx)
	elected := make(chan struct{})
	go func() { elector.Run(electing); close(elected) }()
	defer func() { stopElecting(); <-elected }()
	select {
	case <-leading:
	case <-time.After(30 * time.Second):
		t.Fatal("never led the Lease")
	}

	tc, err := metricsTLS("")
	if err != nil {
		t.Fatal(err)
	}
	addr := testenv.FreeAddr(t)
	serveTLS(ctx, addr, "/metrics", guard(rc, main), tc)
	client := &http.Client{Transport: &http.Transport{
		TLSClientConfig:     &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // metricsTLS's self-signed certificate
		MaxIdleConnsPerHost: floodWorkers,
	}}
	scrape := func(ctx context.Context, token string) int {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+"/metrics", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := client.Do(req)
		if err != nil {
			return 0
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		return scrape(ctx, goodToken) == http.StatusOK, nil
	}); err != nil {
		t.Fatal("the scraper's good token never got the metrics")
	}

	res := floodResult{codes: map[int]int{}}
	var mu sync.Mutex
	fctx, fcancel := context.WithTimeout(ctx, floodLimit)
	defer fcancel()
	flooding.Store(true)
	start := time.Now()
	var watchers sync.WaitGroup
	watchers.Go(func() { // the scraper and the main client's reads, once a second each
		for tick := time.NewTicker(time.Second); ; {
			select {
			case <-fctx.Done():
				tick.Stop()
				return
			case <-tick.C:
			}
			// Each probe runs to its end on a context of its own: the flood's end must not
			// cut one short and make it look failed.
			pctx, pcancel := context.WithTimeout(ctx, floodLimit)
			code := scrape(pctx, goodToken)
			t0 := time.Now()
			_, err := main.CoordinationV1().Leases(ns).Get(pctx, leaseName, metav1.GetOptions{})
			took := time.Since(t0)
			pcancel()
			mu.Lock()
			res.goodCodes = append(res.goodCodes, code)
			res.maxMainGet = max(res.maxMainGet, took)
			if err != nil {
				res.mainErrs = append(res.mainErrs, err.Error())
			}
			mu.Unlock()
		}
	})
	var next atomic.Int64
	var flood sync.WaitGroup
	for range floodWorkers {
		flood.Go(func() {
			for i := next.Add(1) - 1; i < floodRequests && fctx.Err() == nil; i = next.Add(1) - 1 {
				code := scrape(fctx, fmt.Sprintf("not-a-token-%d-%d", time.Now().UnixNano(), i))
				if code == 0 && fctx.Err() != nil {
					break // cut off by floodLimit, not unanswered
				}
				mu.Lock()
				res.codes[code]++
				mu.Unlock()
			}
		})
	}
	flood.Wait()
	end := time.Now()
	fcancel()
	watchers.Wait()
	flooding.Store(false)
	res.elapsed, res.lost = end.Sub(start), lost.Load()

	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, r := range rec.reviews {
		if !r.Before(start) && !r.After(end) {
			res.reviews++
		}
	}
	// Gaps between renewals that reach into the flood, the last one up to the flood's end.
	renewals := append(slices.Clone(rec.renewals), end)
	for i := 1; i < len(renewals); i++ {
		if renewals[i].After(start) && !renewals[i-1].After(end) {
			res.maxRenewGap = max(res.maxRenewGap, renewals[i].Sub(renewals[i-1]))
		}
	}
	return res
}

// A flood of bad tokens on the secure metrics endpoint neither delays the leader's Lease
// renewals nor the main client's requests, and costs the API server at most the reviews' rate
// limit in TokenReviews; a scraper whose token is cached keeps its metrics throughout. The main
// client runs at --kube-api-qps 5 (client-go's default) with burst 10: were the reviews made
// through it, the flood's reviews would queue ahead of the renewals in its rate limiter.
func TestMetricsAuthFloodKeepsTheLease(t *testing.T) {
	c := testenv.Connect(t)
	ns := c.Namespace(t)
	good := metricsReaderToken(t, c, ns)
	res := runLeaseFlood(t, c, ns, 5, 10, good, func(rc *rest.Config, _ kubernetes.Interface) http.Handler {
		reviews, err := newMetricsReviewClient(rc)
		if err != nil {
			t.Fatal(err)
		}
		return newMetricsAuth(reviews, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("metrics")) }))
	})
	t.Logf("flood: %s", res)

	if res.lost {
		t.Errorf("the leader lost its Lease during the flood")
	}
	// Renewals come every RetryPeriod; 2 s more allows for a loaded machine, far below the
	// RenewDeadline at which the leader gives up.
	if limit := floodRetry + 2*time.Second; res.maxRenewGap > limit {
		t.Errorf("the Lease went %s without a renewal during the flood, want at most %s", res.maxRenewGap, limit)
	}
	if limit := 2 * time.Second; res.maxMainGet > limit || len(res.mainErrs) > 0 {
		t.Errorf("a GET through the main client took %s during the flood (errors %q), want at most %s and none", res.maxMainGet, res.mainErrs, limit)
	}
	if limit := metricsReviewBurst + int(metricsReviewQPS*res.elapsed.Seconds()) + 1; res.reviews > limit {
		t.Errorf("the API server answered %d TokenReviews in %s, want at most %d (the reviews' rate limit)", res.reviews, res.elapsed, limit)
	}
	// The flood must have been one: hundreds of requests, some reviewed (401), the rest turned
	// away (503); none let through, none unanswered.
	answered := res.codes[http.StatusUnauthorized] + res.codes[http.StatusServiceUnavailable]
	if len(res.codes) != 2 || res.codes[http.StatusUnauthorized] == 0 || answered < 300 {
		t.Errorf("flood answers by status %v: want 401 and 503 only, at least 300 in all", res.codes)
	}
	if len(res.goodCodes) < int(res.elapsed/time.Second)/2 || slices.ContainsFunc(res.goodCodes, func(c int) bool { return c != http.StatusOK }) {
		t.Errorf("the scraper with a good token got %v during the flood, want 200 each time", res.goodCodes)
	}
}
