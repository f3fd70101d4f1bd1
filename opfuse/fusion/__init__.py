"""The partitioner: group nodes into kernels under a target's capabilities, with reasons."""

from __future__ import annotations

from opfuse.fusion.partition import partition, trivial_partition
from opfuse.fusion.types import REASONS
from opfuse.schedule import Decision, Kernel, Partition

__all__ = ["REASONS", "Decision", "Kernel", "Partition", "partition", "trivial_partition"]
