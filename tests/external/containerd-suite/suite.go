// Package suite only anchors the containerd requirement: the binaries built from this module
// are containerd's own integration/client test binary and its failpoint runc (runc-fp).
package suite

import (
	_ "github.com/containerd/containerd/v2/integration/client"
	_ "github.com/containerd/containerd/v2/integration/failpoint"
)
