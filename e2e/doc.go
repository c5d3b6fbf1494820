// Package e2e holds the browser test of the demo's live page. It lives in a
// module of its own so that the core module does not depend on chromedp,
// and users without Chromium are not burdened: the test skips with an
// install hint when Chromium is missing, and fails instead when
// KEYRATE_INTEGRATION=1 is set (as CI does).
package e2e
