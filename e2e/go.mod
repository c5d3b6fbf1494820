module github.com/keyrate/keyrate/e2e

go 1.26

require (
	github.com/chromedp/chromedp v0.23.0
	github.com/keyrate/keyrate v0.1.0
)

replace github.com/keyrate/keyrate => ../

require (
	github.com/chromedp/cdproto v0.159.0 // indirect
	github.com/go-json-experiment/json v0.0.0-20260213210345-44df1a37e875 // indirect
)
