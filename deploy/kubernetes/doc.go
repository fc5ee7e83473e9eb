// Package kubernetes holds the Kubernetes manifests of embed-stack (Deployment,
// Service, HorizontalPodAutoscaler, PodDisruptionBudget, and the Prometheus adapter
// rule the autoscaler's metric comes from) and, in its test, their validation: every
// document is decoded strictly into the k8s.io/api types of its apiVersion and kind
// (an unknown or misspelt field, a wrong type or an invalid quantity fails), the
// objects are checked against each other (selectors, ports, the scale target, the
// metric name), and the real binary is run with the Deployment's arguments and
// environment to show that it accepts them and serves the probed paths and the
// metric the autoscaler reads.
//
// It has no code: it refuses to know anything but the manifests' consistency.
package kubernetes
