// Package docs holds the documentation's own tests, so that the pages cannot drift
// from what users see:
//
//   - troubleshooting_test.go: the error messages troubleshooting.md quotes are
//     produced by the real server and binary;
//   - curl_test.go: every curl example of README.md and docs/ runs as written against
//     the real binary serving what the page's own serve command serves (several models
//     where it says so), and its status and answer match what the page shows;
//   - links_test.go: every link of README.md and docs/ to a file of the repository
//     resolves, #anchors included.
//
// (The client snippets are tested next to them, in clients/, and by
// conformance/python/test_snippets.py.)
//
// It has no code: it refuses to know anything but the pages and the public surfaces.
package docs
