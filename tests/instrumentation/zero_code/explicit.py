"""The explicit way, for comparison: `spanscore.instrumentation.instrument()` (configured by the
same environment variables), then the app given as the first argument, as `__main__`."""

import runpy
import sys

import spanscore.instrumentation

spanscore.instrumentation.instrument()
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
