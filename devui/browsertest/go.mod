module github.com/deputy-go/deputy/devui/browsertest

go 1.26.0

require github.com/chromedp/chromedp v0.23.1

require (
	github.com/chromedp/cdproto v0.160.1 // indirect
	github.com/go-json-experiment/json v0.0.0-20260213210345-44df1a37e875 // indirect
)

replace github.com/deputy-go/deputy => ../..
