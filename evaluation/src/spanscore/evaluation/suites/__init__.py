"""Suites: the model of a suite file, loading it with located errors, the importers of other
tools' formats, and the loaded suite that scores a trajectory."""
