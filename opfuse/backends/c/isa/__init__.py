"""Instruction-set specific code writers of the C backend (x86 int8 micro-kernels: x86_int8.py)."""
