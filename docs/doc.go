// Package docs holds the documentation's own tests: the error messages that
// troubleshooting.md quotes are produced by the real server and binary, so the page
// cannot drift from what users see. (The client snippets are tested next to them, in
// clients/.)
//
// It has no code: it refuses to know anything but the pages and the public surfaces.
package docs
