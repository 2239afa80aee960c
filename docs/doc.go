// Package docs holds graphsync's user documentation (the Markdown pages
// beside this file and docs/adr/). It has no code: its test checks that
// every relative link in README.md and the pages resolves, so that
// `make test` fails on a page moved or renamed without its links.
package docs
