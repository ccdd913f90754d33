// Command bundle-validate checks an OLM bundle directory with the operator-framework's own
// validators (the library `operator-sdk bundle validate` uses): the bundle's structure, the CSV
// (install modes, permissions, owned-CRD descriptors, alm-examples) and the CRDs. It prints
// every error and warning and exits 1 on any error.
package main

import (
	"fmt"
	"os"

	"github.com/operator-framework/api/pkg/manifests"
	"github.com/operator-framework/api/pkg/validation"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: bundle-validate BUNDLE_DIR")
		os.Exit(2)
	}
	bundle, err := manifests.GetBundleFromDir(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "bundle-validate: loading bundle:", err)
		os.Exit(1)
	}
	errs := 0
	for _, result := range validation.DefaultBundleValidators.Validate(bundle) {
		for _, e := range result.Errors {
			fmt.Printf("ERROR %s: %s\n", result.Name, e.Error())
			errs++
		}
		for _, w := range result.Warnings {
			fmt.Printf("WARN  %s: %s\n", result.Name, w.Error())
		}
	}
	if errs > 0 {
		fmt.Printf("bundle %s: %d errors\n", os.Args[1], errs)
		os.Exit(1)
	}
	fmt.Printf("bundle %s: valid (%s)\n", os.Args[1], bundle.CSV.GetName())
}
