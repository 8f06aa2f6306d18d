"""The simulated MoE router: near-tie flips between launches, a build's kernel-like flips, the shared-slot defect
and SGLang's wire dtypes (abh_simulator.experts)."""

from __future__ import annotations

import numpy as np
import pytest

from abh_simulator import experts
from abh_simulator.sim_config import SimConfig

E, K, L, N = 384, 6, 8, 4000
STATES = [int(x) for x in np.random.default_rng(5).integers(1, 2**62, N + 1)]


def route(**kw: object) -> np.ndarray:
    args: dict = {"seed": 0, "num_experts": E, "topk": K, "num_layers": L, "buggy": False}
    args.update(kw)
    return experts.routed_experts(STATES, 0, N, **args)


def same_set_share(a: np.ndarray, b: np.ndarray) -> float:
    return float((np.sort(a, axis=2) == np.sort(b, axis=2)).all(axis=2).mean())


def test_launches_of_one_build_differ_only_on_near_ties_of_their_own():
    a1 = route(noise_share=0.01, launch_key=1)
    a2 = route(noise_share=0.01, launch_key=2)
    share = same_set_share(a1, a2)
    # each launch flips 1 % of the rows on its own: the sets differ where exactly one of them flipped
    want = 1 - 2 * 0.01 * 0.99
    assert abs(share - want) < 4 * np.sqrt(want * (1 - want) / (N * L))
    # where they differ, one id moved: the k-th expert was swapped for the (k+1)-th
    moved = K - np.array([len(set(x) & set(y)) for x, y in zip(a1.reshape(-1, K).tolist(), a2.reshape(-1, K).tolist(),
                                                              strict=True)])
    assert set(np.unique(moved)) == {0, 1}
    assert (route(noise_share=0.0, launch_key=1) == route(noise_share=0.0, launch_key=2)).all()  # deterministic


def test_a_kernel_like_change_flips_near_ties_on_its_share_of_rows_on_every_launch():
    base = route(build_key="base", shift_share=0.0)
    fix1 = route(build_key="fix", shift_share=0.02, launch_key=1)
    fix2 = route(build_key="fix", shift_share=0.02, launch_key=2)
    assert (fix1 == fix2).all()  # keyed by the build, not the launch
    share = 1 - same_set_share(base, fix1)
    assert abs(share - 0.02) < 4 * np.sqrt(0.02 * 0.98 / (N * L))


def test_the_shared_slot_defect_routes_k_minus_1_and_writes_the_marker_one_past_the_end():
    bug, fix = route(buggy=True), route()
    assert (bug[:, :, -1] == E).all() and (bug[:, :, :-1] < E).all()
    assert all(len(set(r)) == K for r in fix.reshape(-1, K).tolist()) and (fix < E).all()
    assert (bug[:, :, :-1] == fix[:, :, :-1]).all()  # the same router, one slot lost
    flipped = route(buggy=True, noise_share=1.0)  # a near tie on a buggy gate moves its (k-1)-th pick
    assert (flipped[:, :, -1] == E).all() and (flipped[:, :, -2] == fix[:, :, -1]).all()


@pytest.mark.parametrize(("asked", "ids_max", "sent"), [("int32", E, "int32"), ("uint16", E, "uint16"),
                                                        ("uint8", 255, "uint8"), ("uint8", E, "int32"),
                                                        ("bogus", E, "int32")])
def test_wire_dtype_is_the_asked_one_where_the_ids_fit(asked, ids_max, sent):
    arr = np.arange(2 * L * K, dtype=np.int32).reshape(2, L, K) % (ids_max + 1)
    arr[0, 0, 0] = ids_max
    payload, name = experts.encode(arr, asked)
    assert name == sent
    assert (experts.decode(payload, L, K, name) == arr).all()
    import base64
    assert len(base64.b64decode(payload)) == arr.size * {"int32": 4, "uint16": 2, "uint8": 1}[sent]


def test_deterministic_launches_have_no_routing_noise():
    c = SimConfig(routing_noise=0.3, deterministic=True).effective()
    assert c.routing_noise == 0.0
    assert any("routing_shift" in p for p in SimConfig(routing_shift=1.5).problems())


def test_the_router_loads_every_expert_alike_and_leaves_unrouted_layers_zero():
    load = np.bincount(route().reshape(-1), minlength=E)
    expected = N * L * K / E
    assert load.size == E and abs(load.max() - expected) < 6 * np.sqrt(expected)
    assert abs(load.min() - expected) < 6 * np.sqrt(expected)
    assert any("unrouted_layers" in p for p in SimConfig(num_layers=4, unrouted_layers=4).problems())
