// Package e2e holds the tests that run the repository's programs as a user
// does: the demo's live page in headless Chromium, and two demo replicas
// sharing one redis-server under keyrate-load. It lives in the development
// module so that no published module depends on chromedp, and users
// without Chromium or Redis are not burdened: each test skips with an
// install hint when what it needs is missing, and fails instead when
// KEYRATE_INTEGRATION=1 is set (as CI does).
package e2e
