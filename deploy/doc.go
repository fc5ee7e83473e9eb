// Package deploy holds the checks of embed-stack's deployment files: the container
// images (Dockerfile, Dockerfile.dev, .dockerignore at the repository root) and, under
// kubernetes/, the cluster manifests.
//
// Docker cannot run where the tests run, and hadolint is not packaged for Debian, so its
// test lints the Dockerfiles with the rules that matter here (pinned base images, apt
// hygiene, a non-root user, exec-form commands, a health check on /ready) and keeps
// them in step with CI: the development image installs every Debian package .ci/run and
// `make deps` install, on the Go version go.mod names, and both images build with the
// Makefile's own targets.
//
// It has no code: it refuses to know anything but those files.
package deploy
