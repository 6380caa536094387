"""GAE and PPO loss terms against hand-computed numbers."""

from __future__ import annotations

import math

import pytest
import torch
from gymnasium import spaces

from marlgrid.agents.algorithms.ppo import ppo_loss
from marlgrid.agents.returns import compute_gae
from marlgrid.agents.storage.rollout_buffer import RolloutBuffer

GAMMA, LAM = 0.9, 0.8  # gamma * lambda = 0.72


def _tensor(rows: list[list[float]]) -> torch.Tensor:
    """Rows are environments; returns time-major (T, B)."""
    return torch.tensor(rows, dtype=torch.float64).T.contiguous()


# Env 0: terminated at t=1, truncated at t=3 (value of the true final observation 3.0),
#        V(observation after the rollout) = 0.5.
# Env 1: no episode end, V(observation after the rollout) = 1.0.
REWARDS = _tensor([[1, 0, 2, 0, 1], [0, 0, 0, 0, 1]])
VALUES = _tensor([[0.5, 1.0, 0.0, 2.0, 1.0], [0.1, 0.2, 0.3, 0.4, 0.5]])
# next_values[t] = value of what truly follows step t. Env 0: t=1 terminated, so its entry (7.0,
# deliberately absurd) must be ignored; t=3 truncated -> value of the final observation, 3.0.
NEXT_VALUES = _tensor([[1.0, 7.0, 2.0, 3.0, 0.5], [0.2, 0.3, 0.4, 0.5, 1.0]])
TERM = _tensor([[0, 1, 0, 0, 0], [0, 0, 0, 0, 0]]).bool()
TRUNC = _tensor([[0, 0, 0, 1, 0], [0, 0, 0, 0, 0]]).bool()

# By hand: delta_t = r_t + 0.9 * V'_t * (1 - term_t) - V_t,
#          A_t = delta_t + 0.72 * (1 - done_t) * A_{t+1}
# Env 0: deltas  t4: 1 + 0.9*0.5 - 1.0 = 0.45      A4 = 0.45
#                t3: 0 + 0.9*3.0 - 2.0 = 0.7       A3 = 0.7                  (truncated: cut)
#                t2: 2 + 0.9*2.0 - 0.0 = 3.8       A2 = 3.8 + 0.72*0.7 = 4.304
#                t1: 0 + 0 (terminated) - 1.0 = -1 A1 = -1.0                 (terminated: cut)
#                t0: 1 + 0.9*1.0 - 0.5 = 1.4       A0 = 1.4 + 0.72*(-1.0) = 0.68
# Env 1: deltas  t4: 1 + 0.9*1.0 - 0.5 = 1.4       A4 = 1.4
#                t3: 0 + 0.9*0.5 - 0.4 = 0.05      A3 = 0.05 + 0.72*1.4 = 1.058
#                t2: 0 + 0.9*0.4 - 0.3 = 0.06      A2 = 0.06 + 0.72*1.058 = 0.82176
#                t1: 0 + 0.9*0.3 - 0.2 = 0.07      A1 = 0.07 + 0.72*0.82176 = 0.6616672
#                t0: 0 + 0.9*0.2 - 0.1 = 0.08      A0 = 0.08 + 0.72*0.6616672 = 0.556400384
EXPECTED_ADV = _tensor(
    [[0.68, -1.0, 4.304, 0.7, 0.45], [0.556400384, 0.6616672, 0.82176, 1.058, 1.4]]
)
# returns = advantages + values
EXPECTED_RET = _tensor(
    [[1.18, 0.0, 4.304, 2.7, 1.45], [0.656400384, 0.8616672, 1.12176, 1.458, 1.9]]
)


def test_gae_hand_computed() -> None:
    adv, ret = compute_gae(REWARDS, VALUES, NEXT_VALUES, TERM, TRUNC, GAMMA, LAM)
    torch.testing.assert_close(adv, EXPECTED_ADV, rtol=0, atol=1e-9)
    torch.testing.assert_close(ret, EXPECTED_RET, rtol=0, atol=1e-9)


def test_gae_termination_and_truncation_together_is_a_termination() -> None:
    term, trunc = TERM.clone(), TRUNC.clone()
    term[3, 0] = True  # env 0 now also terminates at t=3: no bootstrap from 3.0
    adv, _ = compute_gae(REWARDS, VALUES, NEXT_VALUES, term, trunc, GAMMA, LAM)
    # delta_3 = 0 - 2.0 = -2.0; A2 = 3.8 + 0.72 * (-2.0) = 2.36
    assert adv[3, 0].item() == pytest.approx(-2.0)
    assert adv[2, 0].item() == pytest.approx(2.36)


def test_buffer_builds_next_values_from_truncation_values() -> None:
    """The buffer turns (values, last_value, truncation values) into the same GAE."""
    buf = RolloutBuffer(5, 2, spaces.Box(0, 1, (1,)), state_size=0)
    buf.rewards.copy_(REWARDS)
    buf.values.copy_(VALUES)
    buf.terminations.copy_(TERM)
    buf.truncations.copy_(TRUNC)
    buf.trunc_values[3, 0] = 3.0
    buf.last_value.copy_(torch.tensor([0.5, 1.0]))
    buf.compute_advantages(GAMMA, LAM)
    torch.testing.assert_close(buf.advantages, EXPECTED_ADV.float())
    torch.testing.assert_close(buf.returns, EXPECTED_RET.float())


def test_buffer_truncation_at_last_step_bootstraps_from_final_obs() -> None:
    buf = RolloutBuffer(2, 1, spaces.Box(0, 1, (1,)), state_size=0)
    buf.rewards[:] = torch.tensor([[0.0], [1.0]])
    buf.values[:] = torch.tensor([[0.0], [0.0]])
    buf.truncations[1, 0] = True
    buf.trunc_values[1, 0] = 2.0  # value of the true final observation
    buf.last_value[0] = -100.0  # value of the first observation of the next episode: unused
    buf.compute_advantages(0.5, 1.0)
    # A1 = 1 + 0.5 * 2.0 - 0 = 2.0 ; A0 = 0 + 0.5 * 0.0 - 0 + 0.5 * 1.0 * 2.0 = 1.0
    torch.testing.assert_close(buf.advantages[:, 0], torch.tensor([1.0, 2.0]))


# ------------------------------------------------------------------------------------------------
# PPO loss on a tiny batch: three real steps plus one padding step.
# ------------------------------------------------------------------------------------------------

CLIP, VF, ENT = 0.2, 0.5, 0.01
RATIOS = [1.5, 0.5, 1.1]
ADV = [1.0, -2.0, 0.5]
NEW_V, OLD_V, RET = [1.0, 0.0, 2.0], [0.5, 0.5, 2.0], [2.0, 1.0, 1.0]
ENTROPY = [0.6, 0.3, 0.9]
# pg: max(-A r, -A clip(r)):  a: max(-1.5, -1.2) = -1.2 ; b: max(1.0, 1.6) = 1.6 ;
#     c: max(-0.55, -0.55) = -0.55  ->  pg_loss = (-1.2 + 1.6 - 0.55) / 3 = -0.05
PG = -0.05
# value, clipped: v_clip = v_old + clamp(v - v_old, -0.2, 0.2) = [0.7, 0.3, 2.0]
#     unclipped errors (v - R)^2 = [1, 1, 1]; clipped errors = [1.69, 0.49, 1.0]
#     max = [1.69, 1, 1] -> 0.5 * 3.69 / 3 = 0.615 ; without clipping 0.5 * 3 / 3 = 0.5
V_CLIPPED, V_PLAIN = 0.615, 0.5
ENT_MEAN = 0.6  # (0.6 + 0.3 + 0.9) / 3
# approx KL = mean((r - 1) - ln r) = [0.5 - ln 1.5, -0.5 - ln 0.5, 0.1 - ln 1.1] / 3
KL = ((0.5 - math.log(1.5)) + (-0.5 - math.log(0.5)) + (0.1 - math.log(1.1))) / 3  # 0.0974573
CLIPFRAC = 2 / 3  # |r - 1| > 0.2 for the first two
LOSS_CLIPPED = PG - ENT * ENT_MEAN + VF * V_CLIPPED  # -0.05 - 0.006 + 0.3075 = 0.2515


def _loss_inputs(pad: float | None) -> tuple[list[torch.Tensor], torch.Tensor]:
    """(new_logp, old_logp, adv, new_v, old_v, ret, entropy) as (2, 2) tensors + mask."""
    old_logp = [-1.0, -0.3, -2.0]
    new_logp = [o + math.log(r) for o, r in zip(old_logp, RATIOS, strict=True)]
    cols = [new_logp, old_logp, ADV, NEW_V, OLD_V, RET, ENTROPY]
    fill = 0.0 if pad is None else pad
    tensors = [torch.tensor(c + [fill], dtype=torch.float32).view(2, 2) for c in cols]
    mask = torch.tensor([True, True, True, pad is None]).view(2, 2)
    return tensors, mask


def loss_of(new_logp, old_logp, adv, new_v, old_v, ret, ent, mask, clip_vloss=True):
    """:func:`ppo_loss` on the hand-computed inputs, in their order, with the module's
    coefficients."""
    return ppo_loss(
        new_logp=new_logp, old_logp=old_logp, adv=adv, new_values=new_v, old_values=old_v,
        returns=ret, entropy=ent, mask=mask, clip=CLIP, clip_vloss=clip_vloss, vf_coef=VF,
        ent_coef=ENT,
    )  # fmt: skip


def test_ppo_loss_and_minibatch_take_names_only() -> None:
    from marlgrid.agents.algorithms.losses import MiniBatch

    (new_logp, old_logp, adv, new_v, old_v, ret, ent), mask = _loss_inputs(pad=0.0)
    with pytest.raises(TypeError):
        ppo_loss(new_logp, old_logp, adv, new_v, old_v, ret, ent, mask, CLIP, True, VF, ENT)
    with pytest.raises(TypeError):
        MiniBatch(None, None, None, None, None, None, None, None, None, None, None)


@pytest.mark.parametrize("clip_vloss", [True, False])
def test_ppo_loss_hand_computed(clip_vloss: bool) -> None:
    (new_logp, old_logp, adv, new_v, old_v, ret, ent), mask = _loss_inputs(pad=0.0)
    loss, terms = loss_of(new_logp, old_logp, adv, new_v, old_v, ret, ent, mask, clip_vloss)
    v = V_CLIPPED if clip_vloss else V_PLAIN
    assert terms["policy_loss"].item() == pytest.approx(PG, abs=1e-6)
    assert terms["value_loss"].item() == pytest.approx(v, abs=1e-6)
    assert terms["entropy"].item() == pytest.approx(ENT_MEAN, abs=1e-6)
    assert terms["approx_kl"].item() == pytest.approx(KL, abs=1e-6)
    assert terms["clipfrac"].item() == pytest.approx(CLIPFRAC, abs=1e-6)
    assert loss.item() == pytest.approx(PG - ENT * ENT_MEAN + VF * v, abs=1e-6)
    if clip_vloss:
        assert loss.item() == pytest.approx(LOSS_CLIPPED, abs=1e-6)


@pytest.mark.parametrize("pad", [0.0, 1e6, -3.0, float("nan"), float("inf")])
def test_ppo_loss_padding_changes_nothing(pad: float) -> None:
    """A padding step (mask false) holding anything changes no term and gets zero gradient."""
    ref_inputs, ref_mask = _loss_inputs(pad=0.0)
    inputs, mask = _loss_inputs(pad=pad)
    # the reference: only the three real steps, as a flat batch with an all-true mask
    flat = [x.flatten()[:3] for x in ref_inputs]
    ref_loss, ref_terms = loss_of(*flat, torch.ones(3, dtype=torch.bool))
    new_logp, new_v, ent = (inputs[i].requires_grad_() for i in (0, 3, 6))
    loss, terms = loss_of(new_logp, inputs[1], inputs[2], new_v, inputs[4], inputs[5], ent, mask)
    assert loss.item() == pytest.approx(ref_loss.item(), abs=1e-6)
    for k, v in ref_terms.items():
        assert terms[k].item() == pytest.approx(v.item(), abs=1e-6), k
    loss.backward()
    for g in (new_logp.grad, new_v.grad, ent.grad):
        assert g is not None and torch.isfinite(g).all()
        assert g[1, 1].item() == 0.0  # the padding step


def test_ppo_loss_all_padding_is_finite() -> None:
    inputs, _ = _loss_inputs(pad=0.0)
    loss, terms = loss_of(*inputs, torch.zeros(2, 2, dtype=torch.bool))
    assert loss.item() == 0.0 and all(torch.isfinite(v) for v in terms.values())
