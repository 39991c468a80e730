"""Calibration: how far the judge agrees with human labels (`spanscore judge-check`)."""
