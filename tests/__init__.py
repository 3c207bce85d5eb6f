"""tagger's tests: importable as a package (tests.fakeserver, tests.harness ...)."""
