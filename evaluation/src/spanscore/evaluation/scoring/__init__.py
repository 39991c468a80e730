"""Scoring: the `Score`, the metric registry and context, the assertion base class, the
protocol by which scoring asks the judge (`deferral`), and the time limit of one score."""
