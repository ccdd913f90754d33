package kgo

// Not part of franz-go: run.sh (kaas, e2e/clients/franzgo-kgo) copies this file into its copy of
// pkg/kgo. run.sh runs every top-level test in its own process, and TestGroupSimple/848 reads
// allow848 without calling adm() first; in franz-go's own single-process run the sequential tests
// before it (TestPauseIssueOct2023, ...) have already called adm(), so there it runs, while alone
// it would always skip itself. Asking the broker for its versions once at start, as adm() does,
// restores that order. Only when run.sh sets KGO_KAAS_ADM_INIT=1.

import "os"

func init() {
	if os.Getenv("KGO_KAAS_ADM_INIT") == "1" {
		adm()
	}
}
