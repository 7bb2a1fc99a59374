// Builds containerd's own integration suite (package integration/client, with its runc-fp
// failpoint runc) at the containerd version under test: tests/setup/build_containerd_suite.sh
// copies this module, pins the containerd requirement to that version and runs go test -c.
module skiff.test/containerd-suite

go 1.24

require github.com/containerd/containerd/v2 v2.4.2
