"""Calibration: the figures the cost model's target files hold, measured on this machine or under
QEMU (docs/architecture.md, "Measurement")."""
