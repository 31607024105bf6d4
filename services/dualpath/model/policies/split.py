"""DualPath with split reads (`dualpath-split`): the paper's stated future work (§6.1, §8).

DualPath reads a request's whole hit on the side whose node has the shorter storage read
queue. When both queues are busy, that leaves the other SNIC's share unused for this
request: the paper's authors expect splitting one request's read across both sides to do
better. This policy does exactly that and nothing else: PE choice, DE choice and batching
are DualPath's (`model/policies/dualpath.py`).

The split rule (water-filling on the read queues). Each side drains its queue at its SNIC's
read rate r (tokens/s; every node has the same SNIC, and like DualPath the policy sees only
`read_q`, so the rates cancel). Reading x of the hit's h tokens on the PE side and h − x on
the DE side, the two parts are in when their queues have drained:

    (q_pe + x) / r  =  (q_de + h − x) / r   =>   x = (h + q_de − q_pe) / 2, clamped to [0, h]

so both parts finish about together and both queues end equal. When |q_pe − q_de| ≥ h the
clamp puts the whole hit on the shorter side: DualPath's own choice. The split is only made
when BOTH queues are busy (read_q > 0): with an idle side, DualPath's rule already sends
the read there, and with both idle the tie rule (`policy.path_tie`) decides, as in DualPath,
so below saturation this policy reads exactly like `dualpath`. (The queues count tokens
queued or being read, not bytes left, so "together" is approximate, as the paper's signal.)

What a split read moves (model/engines/split_read.py, model/engines/prefill.py): two
concurrent storage flows, the first `pe_part` tokens' blocks through the PE node's SNIC into
the PE buffer and the rest through the DE node's SNIC into the DE buffer, each side's
`read_q` holding its part until that part is in. Per layer the PE loads its part from its
own buffer (H2D) and the DE part over DE CNIC → PE CNIC, like the DE path; after the first
chunk the PE ships its part with the new tokens' KV to the DE buffer, like the PE path.
The scheduler rounds `pe_part` to whole blocks (storage moves Full Blocks); a part that
rounds to nothing turns the read into a plain PE or DE read.

Runs on the virtual-time runtime (`dualpath sim`, experiments). The process runtime's read
seam is one ReadKv call on one node, so it refuses this policy when its scheduler starts.
"""

from __future__ import annotations

from typing import ClassVar

from dualpath.model.entities.request import NodeState, ReadPath, Request
from dualpath.model.policies.base import SchedulingPolicy
from dualpath.model.policies.dualpath import DualPath


def pe_share(hit: int, pe_read_q: int, de_read_q: int) -> int:
    """Tokens of a `hit` to read on the PE side so that both sides finish together (see
    the module docstring): (hit + q_de − q_pe) / 2, clamped to [0, hit]."""
    return max(0, min(hit, (hit + de_read_q - pe_read_q) // 2))


class DualPathSplit(DualPath):
    name = "dualpath-split"
    description = "DualPath; when both read queues are busy, split a hit across PE and DE"
    # The engines look for this flag: a split read is two flows, one per side.
    splits_reads: ClassVar[bool] = True

    def choose_path(self, request: Request, pe_node: NodeState, de_node: NodeState) -> ReadPath:
        """DualPath's choice unless both read queues are busy; then split the hit so both
        sides finish together. Sets `request.pe_part` (PE-side tokens) on a split."""
        if pe_node.read_q <= 0 or de_node.read_q <= 0 or request.hit <= 0:
            return super().choose_path(request, pe_node, de_node)
        pe_part = pe_share(request.hit, pe_node.read_q, de_node.read_q)
        if pe_part <= 0:
            return ReadPath.DE
        if pe_part >= request.hit:
            return ReadPath.PE
        request.pe_part = pe_part
        return ReadPath.SPLIT


POLICIES: tuple[type[SchedulingPolicy], ...] = (DualPathSplit,)
