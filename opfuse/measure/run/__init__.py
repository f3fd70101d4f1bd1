"""Running generated C: built and run on the host through ctypes, timed per kernel, or
cross-compiled and run on a board under QEMU (docs/architecture.md, "Measurement")."""
