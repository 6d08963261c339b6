"""The calibration corpus generator (benchmark-only; needs the ``corpus`` extra). See README.md."""
