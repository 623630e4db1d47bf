package commands

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	authnv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
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
