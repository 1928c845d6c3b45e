"""Loops that hand device results to host code every iteration (an environment
step, a host model), what such code answers, rare recovery paths, host buffers
and dummy probes: the shared answers in rules/_sync.py, rules/_device.py and
rules/_frequency.py as TL101, TL102, TL201 and TL302 use them, each with the
near-miss that must still be reported."""

from __future__ import annotations

from tests.helpers import lint


def found(code: str, select: str = "TL101,TL102", path: str = "train.py"):
    return [(d.code, d.line) for d in lint(code, select=select.split(","), path=path)]


# -- a rollout loop that steps a host environment on the policy's actions ----------------

SAC = """
import torch


def train(envs, actor, qf, q_optimizer, log_alpha, a_optimizer, args, device):
    obs, _ = envs.reset()
    for global_step in range(args.total_timesteps):
        actions, _, _ = actor.get_action(torch.Tensor(obs).to(device))
        actions = actions.detach().cpu().numpy()
        next_obs, rewards, terminations, truncations, infos = envs.step(actions)
        obs = next_obs
        for _ in range(args.policy_frequency):
            a_loss = (-log_alpha.exp() * qf(obs)).mean()
            a_optimizer.zero_grad()
            a_loss.backward()
            a_optimizer.step()
            alpha = log_alpha.exp().item()
"""


def test_an_update_inside_a_rollout_loop_that_steps_the_environment_adds_no_wait():
    # The rollout loop waits for the policy's actions every iteration (they go to
    # the environment on the host); one more read in the update loop inside it
    # adds no new wait.
    assert found(SAC) == []


def test_a_rollout_loop_on_device_actions_does_not_wait():
    # Isaac Gym and other device simulators take device actions: nothing waits,
    # and the read in the update loop is the only wait of the step.
    code = SAC.replace("        actions = actions.detach().cpu().numpy()\n", "")
    assert found(code) == [("TL101", 16)]


PPO = """
import torch


def train(envs, agent, optimizer, args, device):
    next_obs = torch.Tensor(envs.reset()[0]).to(device)
    for iteration in range(args.num_iterations):
        for step in range(args.num_steps):
            with torch.no_grad():
                action, logprob, _, value = agent.get_action_and_value(next_obs)
            next_obs, reward, terminations, truncations, infos = envs.step(action.cpu().numpy())
            next_obs = torch.Tensor(next_obs).to(device)
        clipfracs = []
        for epoch in range(args.update_epochs):
            for start in range(0, args.batch_size, args.minibatch_size):
                _, newlogprob, entropy, newvalue = agent.get_action_and_value(b_obs[start:])
                ratio = (newlogprob - b_logprobs[start:]).exp()
                loss = -(ratio * b_advantages[start:]).mean()
                clipfracs += [((ratio - 1.0).abs() > args.clip_coef).float().mean().item()]
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
"""


def test_the_update_loop_beside_a_rollout_loop_is_still_reported():
    # The minibatch loop is not inside the rollout loop: nothing else waits there.
    assert found(PPO) == [("TL101", 19)]


def test_what_a_host_environment_answers_is_a_host_value():
    code = """
    import numpy as np
    import torch


    def collect(envs, obs_rms, args):
        next_ob = []
        for step in range(args.num_steps):
            acs = np.random.randint(0, envs.single_action_space.n, size=(args.num_envs,))
            s, r, d, _ = envs.step(acs)
            next_ob += s[:, 3, :, :].reshape([-1, 1, 84, 84]).tolist()
            loss = torch.zeros(()).cuda()
            loss.backward()
    """
    assert found(code) == []
    # An environment given device actions may answer on the device.
    device_env = code.replace(
        "acs = np.random.randint(0, envs.single_action_space.n, size=(args.num_envs,))",
        "acs = torch.randint(0, 4, (args.num_envs,), device='cuda')",
    )
    assert found(device_env) == [("TL101", 11)]


# -- a host model in the loop: its input goes to the host, its answer comes back --------

HOST_MODEL = """
import torch


class Model(torch.nn.Module):
    def forecast(self, x_enc):
        outputs = []
        for i in range(x_enc.shape[-1]):
            output, _ = self.model.forecast(horizon=self.pred_len, inputs=x_enc[:, :, i].cpu().numpy().tolist())
            outputs.append(torch.Tensor(output).to(x_enc.device))
        return torch.stack(outputs, dim=-1)

    def forward(self, x_enc):
        return self.forecast(x_enc)
"""


def test_a_copy_handed_to_a_host_model_whose_answer_comes_back_is_needed():
    assert found(HOST_MODEL) == []


def test_a_copy_whose_result_stays_on_the_host_is_still_reported():
    # Nothing comes back to the device: the copy is a per-iteration list of results.
    code = HOST_MODEL.replace(
        "outputs.append(torch.Tensor(output).to(x_enc.device))", "outputs.append(output)"
    ).replace(
        "output, _ = self.model.forecast(horizon=self.pred_len, inputs=x_enc[:, :, i].cpu().numpy().tolist())",
        "output = x_enc[:, :, i].cpu().numpy() * 2",
    )
    assert found(code) == [("TL102", 9)]


# -- host values and host buffers in TL102 ----------------------------------------------------

def test_a_batch_part_the_loader_yields_is_already_on_the_host():
    code = """
    import numpy as np
    import torch


    def train_2afc(data_loader, func, optimizer):
        gts = []
        for data in data_loader.load_data():
            func(data).backward()
            optimizer.step()
            gts += data['judge'].cpu().numpy().flatten().tolist()
        return np.array(gts)
    """
    assert found(code, "TL102") == []
    # What a function makes of it may live on the device.
    computed = code.replace("gts += data['judge'].cpu()", "gts += func(data['judge']).cpu()")
    assert found(computed, "TL102") == [("TL102", 11)]


HOST_BUFFER = """
import torch


def build_old_policy(agent, aux_obs, args, device):
    aux_pi = torch.zeros((args.num_steps, args.aux_batch_rollouts, 15))
    for start in range(0, args.aux_batch_rollouts, args.num_aux_rollouts):
        m_aux_obs = aux_obs[:, start:start + args.num_aux_rollouts].to(device)
        with torch.no_grad():
            pi_logits = agent.get_pi(m_aux_obs).logits.cpu().clone()
        aux_pi[:, start:start + args.num_aux_rollouts] = pi_logits
        loss = agent.aux_loss(m_aux_obs)
        loss.backward()
    return aux_pi
"""


def test_results_written_into_a_host_buffer_are_kept_there_on_purpose():
    assert found(HOST_BUFFER, "TL102") == []


def test_results_written_into_a_device_buffer_are_reported():
    code = HOST_BUFFER.replace(
        "aux_pi = torch.zeros((args.num_steps, args.aux_batch_rollouts, 15))",
        "aux_pi = torch.zeros((args.num_steps, args.aux_batch_rollouts, 15), device=device)",
    )
    assert found(code, "TL102") == [("TL102", 10)]


# -- rare recovery paths (TL201 and the frequency model) ----------------------------------------

RECOVERY = """
import torch
import torch.nn as nn


class KPLayer(nn.Module):
    def forward(self, z):
        x, y = z[:, :-1], z[:, 1:]
        K = torch.linalg.lstsq(x, y).solution
        if torch.isnan(K).any():
            print('Encounter K with nan, replace K by identity matrix')
            K = torch.eye(K.shape[1]).to(K.device).unsqueeze(0).repeat(z.shape[0], 1, 1)
        return torch.bmm(z[:, -1:], K)
"""


def test_code_that_runs_only_on_non_finite_values_is_rare():
    assert found(RECOVERY, "TL201") == []
    for test in ("not torch.isfinite(K).all()", "torch.any(torch.isinf(K))", "torch.isnan(K).any() and self.verbose"):
        assert found(RECOVERY.replace("torch.isnan(K).any()", test), "TL201") == [], test


def test_code_under_a_test_that_holds_for_finite_values_runs_every_step():
    for test in ("torch.isfinite(K).all()", "not torch.isnan(K).any()", "torch.isnan(K).any() or self.reset"):
        assert found(RECOVERY.replace("torch.isnan(K).any()", test), "TL201") == [("TL201", 12)], test


# -- TL302: a probe of the model on a dummy input ------------------------------------------------

PROBE = """
import torch


def main(opt):
    model_t = load_teacher(opt.path_t)
    model_s = build_student(opt)
    data = torch.randn(2, 3, 32, 32)
    model_t.eval()
    model_s.eval()
    feat_t, _ = model_t(data, is_feat=True)
    feat_s, _ = model_s(torch.zeros(2, 3, 32, 32), is_feat=True)
    return [f.shape[1] for f in feat_t], [f.shape[1] for f in feat_s]
"""


def test_a_forward_on_a_dummy_input_at_setup_is_not_an_inference():
    assert found(PROBE, "TL302") == []


def test_a_forward_on_real_data_is_still_an_inference():
    real = PROBE.replace("data = torch.randn(2, 3, 32, 32)", "data = torch.tensor(load_images(opt.path))")
    # (in `main`, which runs once, one forward pass is a graph freed at return: tests/test_precision_set_gg.py)
    assert found(real.replace("def main(opt):", "def extract(opt):"), "TL302") == [("TL302", 5)]
    looped = PROBE.replace(
        "feat_t, _ = model_t(data, is_feat=True)", "for _ in range(opt.n):\n        feat_t, _ = model_t(data, is_feat=True)"
    )
    assert found(looped, "TL302") == [("TL302", 5)]


# -- TL103 in a loop that waits every iteration anyway ---------------------------------------------

VIDEO = """
import torch


def inference_video(args, reader, writer, upsampler, device):
    while True:
        img = reader.get_frame()
        if img is None:
            break
        try:
            output, _ = upsampler.enhance(img, outscale=args.outscale)
        except RuntimeError as error:
            print('Error', error)
        else:
            writer.write_frame(output)
        torch.cuda.synchronize(device)
"""


def test_a_sync_in_a_loop_that_writes_its_results_every_iteration_is_free():
    assert found(VIDEO, "TL103") == []


def test_a_sync_in_a_loop_that_writes_only_sometimes_is_reported():
    code = VIDEO.replace("        else:\n            writer.write_frame(output)\n", "        if args.save:\n            writer.write_frame(output)\n")
    assert found(code, "TL103") == [("TL103", 16)]


def test_a_sync_in_a_rollout_loop_is_free():
    code = """
    import torch


    def rollout(envs, agent, obs, args):
        for step in range(args.num_steps):
            action = agent(obs)
            obs, reward, done, info = envs.step(action.cpu().numpy())
            obs = torch.Tensor(obs).cuda()
            torch.cuda.synchronize()
    """
    assert found(code, "TL103") == []
    assert found(code.replace("action.cpu().numpy()", "action"), "TL103") == [("TL103", 10)]


# -- TL101: reads the program needs every step --------------------------------------------------

GUARDED = """
import numpy as np
import torch


def train(model, loader, optimizer):
    total_loss = 0
    for data, target in loader:
        losses = model(data.cuda(), target.cuda())
        loss_val = losses[0]
        total_loss += loss_val.item()
        loss_values = [v.item() for v in losses]
        assert not np.isnan(total_loss)
        loss_val.backward()
        optimizer.step()
"""


def test_a_running_total_asserted_finite_every_step_is_needed_and_other_reads_are_free():
    assert found(GUARDED, "TL101") == []


def test_without_the_guard_every_read_is_reported():
    code = GUARDED.replace("        assert not np.isnan(total_loss)\n", "")
    assert found(code, "TL101") == [("TL101", 11), ("TL101", 12)]


def test_a_guard_under_a_condition_does_not_make_the_loop_wait():
    code = GUARDED.replace("        assert not np.isnan(total_loss)\n", "        if debug:\n            assert not np.isnan(total_loss)\n")
    assert found(code, "TL101") == [("TL101", 12)]


SAMPLER = """
import torch


def sample(model, corpus, state, num_samples, f):
    input = torch.randint(0, 100, (1, 1)).cuda()
    for i in range(num_samples):
        output, state = model(input, state)
        word_id = torch.multinomial(output.exp(), num_samples=1).item()
        input.fill_(word_id)
        word = corpus.dictionary.idx2word[word_id]
        word = '\\n' if word == '<eos>' else word + ' '
        f.write(word)
"""


def test_a_sampled_token_looked_up_and_written_out_is_the_point():
    assert found(SAMPLER, "TL101") == []


def test_a_value_only_summed_before_a_write_is_still_reported():
    # (not fed back as the next input either: `input.fill_(word_id)` alone makes it
    # autoregressive sampling, which waits for each token by design)
    code = SAMPLER.replace("word = corpus.dictionary.idx2word[word_id]", "word = total + word_id").replace(
        "        input.fill_(word_id)\n", ""
    )
    assert found(code, "TL101") == [("TL101", 9)]


ALL_GATHER = """
import pickle
import torch
import torch.distributed as dist


def all_gather(data, world_size):
    buffer = pickle.dumps(data)
    tensor = torch.ByteTensor(torch.ByteStorage.from_buffer(buffer)).to("cuda")
    local_size = torch.IntTensor([tensor.numel()]).to("cuda")
    size_list = [torch.IntTensor([1]).to("cuda") for _ in range(world_size)]
    dist.all_gather(size_list, local_size)
    size_list = [int(size.item()) for size in size_list]
    return size_list


def train(loader, model):
    for x in loader:
        loss = model(x)
        loss.backward()
        logs = all_gather({"loss": loss.detach()}, 2)
"""


def test_reads_in_an_all_gather_of_pickled_objects_are_the_protocol():
    assert found(ALL_GATHER, "TL101") == []
    plain = ALL_GATHER.replace("    buffer = pickle.dumps(data)\n", "    buffer = bytes(data)\n")
    # without pickle, the sizes of the gather are still its protocol (set AA)...
    assert found(plain, "TL101") == []
    # ...but other values read there are not
    plain = plain.replace("[int(size.item()) for size in size_list]", "[int(v.item()) for v in gathered]")
    assert found(plain, "TL101") == [("TL101", 13)]


def test_a_module_level_input_reused_by_every_call_is_not_a_probe():
    code = """
    import torch

    inputs = torch.randn(32, 512)


    def run(model):
        model.eval()
        return model(inputs).softmax(dim=1)
    """
    assert found(code, "TL302") == [("TL302", 7)]
