// Command kstatus computes the status of Kubernetes objects with
// sigs.k8s.io/cli-utils/pkg/kstatus/status, the library Flux, kpt and
// cli-utils' own `apply` use to tell whether a resource is reconciled. The
// operator's tests feed it the objects it wrote to a real API server, so the
// conditions they carry are read by the real thing rather than by our idea
// of it. It is test tooling: `cargo xtask testenv` builds it into the test
// cache, and nothing ships it.
//
// It reads JSON objects (as `kubectl get -o json` prints one) from stdin,
// one after another, and writes one JSON line per object:
//
//	{"status": "Current", "message": "Resource is Ready"}
//
// A document that is not an object with a kind is an error on stderr and
// exit status 2.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

type answer struct {
	Status  string `json:"status"`
	Message string `json:"message"`
}

func main() {
	decoder := json.NewDecoder(os.Stdin)
	encoder := json.NewEncoder(os.Stdout)
	for {
		var raw json.RawMessage
		err := decoder.Decode(&raw)
		if err == io.EOF {
			return
		}
		if err != nil {
			fail("reading an object: %v", err)
		}
		// Unstructured's own decoding keeps integers int64, as kstatus
		// reads generations; plain encoding/json would make them float64.
		var object unstructured.Unstructured
		if err := object.UnmarshalJSON(raw); err != nil {
			fail("reading an object: %v", err)
		}
		result, err := status.Compute(&object)
		if err != nil {
			fail("computing the status: %v", err)
		}
		if err := encoder.Encode(answer{Status: result.Status.String(), Message: result.Message}); err != nil {
			fail("writing the answer: %v", err)
		}
	}
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "kstatus: "+format+"\n", args...)
	os.Exit(2)
}
