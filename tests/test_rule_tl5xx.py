"""Unit tests for the opt-in whole-program rules TL501-TL507."""

from __future__ import annotations

import pytest

from tests.helpers import codes, lint
from torchlint.registry import all_rules, default_codes

CODES = ["TL501", "TL502", "TL503", "TL504", "TL505", "TL506", "TL507"]
MODULE_RULES = ["TL503", "TL504", "TL505"]


def run(code: str, select, path: str = "train.py", **overrides):
    if isinstance(select, str):
        select = [select]
    return lint(code, select=select, path=path, **overrides)


def positions(code: str, select, path: str = "train.py"):
    return [(d.line, d.column, d.code) for d in run(code, select, path)]


@pytest.mark.parametrize("code", CODES)
def test_opt_in_and_documented(code):
    rule = all_rules()[code]
    assert rule.default is False
    assert code not in default_codes()
    assert rule.fix.value == "none"


def test_not_selected_by_default():
    code = "import torch\ntorch.use_deterministic_algorithms(True)\n"
    assert "TL502" not in codes(lint(code, select=default_codes()))
    assert "TL502" in codes(lint(code, select=["ALL"]))


# -- the training-step programs (TL501 part 2, TL503, TL504, TL505) -----------

SCRIPT = """
import torch
from torch import nn

def train(model, loader, optimizer):
    for x, y in loader:
        x, y = x.cuda(), y.cuda()
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()

def finetune(model, loader, optimizer):
    for x, y in loader:
        loss = nn.functional.cross_entropy(model(x.cuda()), y.cuda())
        loss.backward()
        optimizer.step()

if __name__ == "__main__":
    model = nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 10)).cuda()
    train(model, loader, torch.optim.AdamW(model.parameters()))
"""


def test_program_rules_report_once_at_the_first_step():
    assert positions(SCRIPT, MODULE_RULES) == [(10, 9, "TL503"), (10, 9, "TL504"), (10, 9, "TL505")]


def test_top_level_training_loop_is_a_program():
    code = """
    import torch
    model = GPT(config).to("cuda")
    for x, y in loader:
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    """
    assert positions(code, MODULE_RULES) == [(6, 5, "TL503"), (6, 5, "TL504"), (6, 5, "TL505")]


def test_prefers_a_backward_in_a_loop():
    # a notebook that demonstrates autograd once, then trains
    code = """
    import torch
    w = torch.randn(3, requires_grad=True, device="cuda")
    (w * 2).sum().backward()
    print(w.grad)
    for x, y in loader:
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
    """
    assert positions(code, "TL504") == [(8, 5, "TL504")]


def test_lbfgs_closure_counts_for_the_enclosing_function():
    code = """
    import torch
    def fit(model, x, y, optimizer):
        x, y = x.cuda(), y.cuda()
        def closure():
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            return loss
        for _ in range(20):
            optimizer.step(closure)
    """
    assert positions(code, "TL504") == [(8, 9, "TL504")]


@pytest.mark.parametrize(
    "body",
    [
        # a backward without an optimizer step: saliency maps, gradient checks
        "def saliency(model, x):\n    x = x.cuda().requires_grad_()\n    model(x).max().backward()\n    return x.grad\n",
        # backward and step in different functions
        "def backward_pass(loss):\n    loss.backward()\n\ndef update(optimizer):\n    optimizer.step()\n    x = y.cuda()\n",
        # only a scheduler / an environment steps
        "def run(model, x, scheduler):\n    model(x.cuda()).sum().backward()\n    scheduler.step()\n",
        "def rollout(env, policy, action):\n    obs = env.step(action)\n    policy(obs.cuda()).sum().backward()\n",
        # the backward is in a method, the step in the class body's other method
        "class Trainer:\n    def backward(self, loss):\n        loss.backward()\n    def step(self):\n        self.optimizer.step()\n        x = y.cuda()\n",
    ],
)
def test_not_a_training_step(body):
    code = "import torch\n" + body + "\nif __name__ == '__main__':\n    main()\n"
    assert run(code, ["TL501", *MODULE_RULES]) == []


@pytest.mark.parametrize(
    "backward",
    ["accelerator.backward(loss)", "self.fabric.backward(loss)", "self.manual_backward(loss)"],
)
def test_framework_driven_steps_are_not_reported(backward):
    code = f"""
    import torch
    def training_step(self, batch):
        loss = self.model(batch.to("cuda")).sum()
        {backward}
        self.optimizer.step()

    if __name__ == "__main__":
        main()
    """
    assert run(code, ["TL501", *MODULE_RULES]) == []


def test_cpu_only_programs_are_not_reported():
    code = SCRIPT.replace(".cuda()", "")
    assert run(code, MODULE_RULES) == []
    # asking whether CUDA exists is not using it
    assert run("import torch\nprint(torch.cuda.is_available())\n" + code, MODULE_RULES) == []


@pytest.mark.parametrize(
    "evidence",
    [
        'device = torch.device("cuda" if torch.cuda.is_available() else "cpu")',
        'device = f"cuda:{local_rank}"',
        "torch.cuda.set_device(local_rank)",
        "model = model.cuda()",
    ],
)
def test_cuda_evidence(evidence):
    code = SCRIPT.replace(".cuda()", "") + evidence + "\n"
    assert codes(run(code, "TL504")) == ["TL504"]


def test_library_module_is_not_a_program():
    # a module that only defines the training function: the program that calls
    # it decides about TF32 and compilation (TL504 still applies to the step)
    library = SCRIPT.split("if __name__")[0]
    assert codes(run(library, MODULE_RULES)) == ["TL504"]


@pytest.mark.parametrize(
    "entry",
    ["main()\n", "for epoch in range(10):\n    train(model, loader, opt)\n", "with open('log') as f:\n    train(model, loader, opt)\n"],
)
def test_entry_points(entry):
    library = SCRIPT.split("if __name__")[0]
    assert codes(run(library + "model = GPT(config)\n" + entry, ["TL503", "TL505"])) == ["TL503", "TL505"]


@pytest.mark.parametrize(
    "setup",
    ["warnings.filterwarnings('ignore')\n", "logging.basicConfig(level=logging.INFO)\n", "sys.path.append('..')\n", "torch.manual_seed(0)\n"],
)
def test_library_set_up_calls_do_not_make_an_entry_point(setup):
    library = SCRIPT.split("if __name__")[0]
    assert codes(run(library + setup, ["TL503", "TL505"])) == []


def test_test_files_are_skipped():
    for path in ("tests/test_train.py", "test_train.py", "conftest.py", "pkg/test/helpers.py"):
        assert run(SCRIPT, CODES, path=path) == []


def test_benchmark_scripts_are_skipped():
    # a benchmark measures one configuration on purpose (a float32 baseline, eager mode)
    assert codes(run(SCRIPT, MODULE_RULES, path="examples/train.py")) == MODULE_RULES
    for path in ("benchmarks/fp8/ddp.py", "amp_benchmark/benchmark_fp32.py", "bench_train.py", "Benchmark.py"):
        assert run(SCRIPT, MODULE_RULES, path=path) == []
    code = "import torch\ntorch.use_deterministic_algorithms(True)\ntorch.backends.cudnn.benchmark = False\n"
    assert run(code, ["TL501", "TL502"], path="benchmarks/fsdp2/main.py") == []


@pytest.mark.parametrize("path", ["scripts/convert_vqgan.py", "compare_outputs.py", "verify_export.py", "check_port.py"])
def test_conversion_and_verification_scripts_may_be_deterministic(path):
    # they run once and compare a converted model's outputs with the original's
    code = (
        "import torch\ntorch.use_deterministic_algorithms(True)\n"
        "torch.backends.cudnn.deterministic = True\ntorch.backends.cudnn.benchmark = False\n"
    )
    assert run(code, ["TL501", "TL502"], path=path) == []
    assert codes(run(code, ["TL501", "TL502"], path="scripts/checkpoint_average.py")) == ["TL502", "TL502", "TL501"]


def test_noqa_on_the_reported_line():
    code = SCRIPT.replace("loss.backward()\n        optimizer.step()\n\ndef finetune", "loss.backward()  # noqa: TL505\n        optimizer.step()\n\ndef finetune")
    assert codes(run(code, MODULE_RULES)) == ["TL503", "TL504"]


# -- TL503 -------------------------------------------------------------------


@pytest.mark.parametrize(
    "setting",
    [
        'torch.set_float32_matmul_precision("high")',
        'torch.set_float32_matmul_precision("highest")',
        "torch.backends.cuda.matmul.allow_tf32 = True",
        "torch.backends.cudnn.allow_tf32 = True",
        "torch.backends.cuda.matmul.allow_tf32 = args.tf32",
        'torch.backends.cuda.matmul.fp32_precision = "tf32"',
        "from torch import set_float32_matmul_precision as smp\nsmp('medium')",
        # reduced precision: matmuls are not float32
        "model = model.to(torch.bfloat16)",
        "model.half()",
        "scaler = torch.cuda.amp.GradScaler()",
        "amp_ctx = partial(torch.autocast, device_type='cuda')",
        "parser.add_argument('--amp', action='store_true')\nargs = parser.parse_args()\nuse_amp = args.amp",
    ],
)
def test_tl503_silent_when_precision_is_chosen(setting):
    assert run(SCRIPT + setting + "\n", "TL503") == []


def test_tl503_convolution_only_network():
    code = SCRIPT.replace("nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 10))", "nn.Sequential(nn.Conv2d(3, 64, 3), nn.ReLU())")
    assert run(code, "TL503") == []
    # a convolutional network with a classifier head: its cost is still the convolutions
    head = code.replace("nn.ReLU())", "nn.ReLU(), nn.Flatten(), nn.Linear(64, 10))")
    assert run(head, "TL503") == []
    # a model built elsewhere: reported only when it is visibly of the transformer family
    elsewhere = SCRIPT.replace("nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 10))", "build_model(args)")
    assert run(elsewhere, "TL503") == []
    assert codes(run(elsewhere.replace("build_model(args)", "timm.create_model('vit_base_patch16_224')"), "TL503")) == [
        "TL503"
    ]
    assert codes(run(elsewhere.replace("build_model(args)", "GPT(GPTConfig())"), "TL503")) == ["TL503"]


def test_input_bound_program_gets_no_kernel_advice():
    """Every loader loads in the main process: TL203 is the fix that matters."""
    loader = "loader = torch.utils.data.DataLoader(dataset, batch_size=64)\n"
    assert run(SCRIPT.replace("def train(", loader + "def train(", 1), MODULE_RULES) == []
    with_workers = loader.replace("batch_size=64", "batch_size=64, num_workers=4")
    assert codes(run(SCRIPT.replace("def train(", with_workers + "def train(", 1), MODULE_RULES)) == [
        "TL503", "TL504", "TL505"
    ]


# -- TL504 -------------------------------------------------------------------


@pytest.mark.parametrize(
    "mention",
    [
        "with torch.autocast('cuda', dtype=torch.bfloat16):\n    train(model, loader, opt)",
        "with torch.cuda.amp.autocast():\n    train(model, loader, opt)",
        "from torch.amp import autocast\nctx = autocast('cuda')",
        "ctx = nullcontext() if cpu else torch.amp.autocast(device_type='cuda', dtype=ptdtype)",
        "scaler = torch.amp.GradScaler('cuda')",
        "if args.use_amp:\n    pass",
        "with maybe_autocast(cfg):\n    pass",
        "model = model.to(dtype=torch.float16)",
        "from apex import amp",
        "import deepspeed",
        "precision = 'bf16-mixed'",
    ],
)
def test_tl504_silent_when_the_module_mentions_reduced_precision(mention):
    assert run(SCRIPT + mention + "\n", "TL504") == []


def test_tl504_decorated_step():
    code = SCRIPT.replace("def train(", "@torch.autocast('cuda')\ndef train(")
    assert run(code, "TL504") == []


# -- TL505 -------------------------------------------------------------------


@pytest.mark.parametrize(
    "mention",
    [
        "model = torch.compile(model)",
        "model = T.compile(model)",
        "from torch import compile as tc\nmodel = tc(model)",
        "@torch.compile\ndef step(x):\n    return x",
        "if args.compile:\n    model = compile_model(model)",
        "import torch._dynamo",
        "accelerator = Accelerator(dynamo_backend='inductor')",
    ],
)
def test_tl505_silent_when_the_module_compiles(mention):
    code = SCRIPT.replace("import torch\n", "import torch\nimport torch as T\n", 1)
    assert run(code + mention + "\n", "TL505") == []


def test_tl505_regex_compile_does_not_count_and_target_torch():
    code = SCRIPT + "import re\npattern = re.compile(r'\\d+')\n"
    assert codes(run(code, "TL505")) == ["TL505"]
    assert run(code, "TL505", target_torch=(1, 13)) == []


# -- TL501 -------------------------------------------------------------------

CONV_SCRIPT = SCRIPT.replace(
    "nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 10))",
    "nn.Sequential(nn.Conv2d(3, 64, 3), nn.ReLU(), nn.Flatten(), nn.LazyLinear(10))",
)


def test_tl501_program_without_benchmark():
    assert positions(CONV_SCRIPT, "TL501") == [(10, 9, "TL501")]
    assert run(SCRIPT, "TL501") == []  # no convolution built here


@pytest.mark.parametrize(
    "setting",
    [
        "torch.backends.cudnn.benchmark = True",
        "torch.backends.cudnn.benchmark = args.cudnn_benchmark",
        "from torch.backends import cudnn\ncudnn.benchmark = not args.deterministic",
        "if args.cudnn_benchmark:\n    enable()",
    ],
)
def test_tl501_program_that_decides(setting):
    assert run(CONV_SCRIPT + setting + "\n", "TL501") == []


def test_tl501_assignment_and_program_report_separately():
    code = CONV_SCRIPT + "torch.backends.cudnn.benchmark = False\n"
    assert positions(code, "TL501") == [(code.count("\n"), 1, "TL501")]


@pytest.mark.parametrize(
    "code",
    [
        "import torch.backends.cudnn as cudnn\ncudnn.benchmark = False\n",
        "from torch.backends import cudnn as c\ndef setup():\n    c.benchmark = False\n",
        "import torch\ntorch.backends.cudnn.benchmark = torch.backends.cudnn.enabled = False\n",
    ],
)
def test_tl501_assignment_positives(code):
    assert codes(run(code, "TL501")) == ["TL501"]


def test_tl501_message_mentions_reproducibility():
    code = "import torch\ntorch.backends.cudnn.deterministic = True\ntorch.backends.cudnn.benchmark = False\n"
    (d,) = run(code, "TL501")
    assert "reproducib" in d.message and (d.line, d.column) == (3, 1)
    (d,) = run("import torch\ntorch.backends.cudnn.benchmark = False\n", "TL501")
    assert "reproducib" not in d.message and "size changes" in d.message


@pytest.mark.parametrize(
    "code",
    [
        "import torch\nif args.deterministic:\n    torch.backends.cudnn.benchmark = False\n",
        "import torch\nif args.seed is not None:\n    torch.backends.cudnn.deterministic = True\n    torch.backends.cudnn.benchmark = False\n",
        "import torch\ntorch.backends.cudnn.benchmark = cfg.benchmark\n",
        "import torch\nif torch.backends.cudnn.benchmark:\n    print('autotuner on')\n",
        "import torch\nbenchmark = False\n",
        "class Cfg:\n    benchmark = False\nimport torch\n",
        "import torch\ndef enable_full_determinism():\n    torch.backends.cudnn.deterministic = True\n    torch.backends.cudnn.benchmark = False\n",
        "import torch\nclass DeterministicEngine:\n    def _init_run(self):\n        torch.backends.cudnn.benchmark = False\n",
        "import torch\ndef make_reproducible():\n    def apply():\n        torch.backends.cudnn.benchmark = False\n    apply()\n",
    ],
)
def test_tl501_assignment_near_misses(code):
    assert run(code, "TL501") == []


# -- TL502 -------------------------------------------------------------------


@pytest.mark.parametrize(
    "code",
    [
        "import torch\ntorch.use_deterministic_algorithms(mode=True)\n",
        "import torch\ntorch.use_deterministic_algorithms(True, warn_only=True)\n",
        "import torch as T\nT.use_deterministic_algorithms(True)\n",
        "from torch import use_deterministic_algorithms as uda\nuda(True)\n",
        "import torch.backends.cudnn as cudnn\ncudnn.deterministic = True\n",
        "import torch\ndef seed_everything(seed):\n    torch.manual_seed(seed)\n    torch.backends.cudnn.deterministic = True\n",
    ],
)
def test_tl502_positives(code):
    assert codes(run(code, "TL502")) == ["TL502"]


@pytest.mark.parametrize(
    "code",
    [
        "import torch\ntorch.use_deterministic_algorithms(False)\n",
        "import torch\ntorch.use_deterministic_algorithms(cfg.deterministic, warn_only=True)\n",
        "import torch\ntorch.use_deterministic_algorithms(*flags)\n",
        "import torch\nif cfg.reproducible:\n    torch.use_deterministic_algorithms(True)\n",
        "import torch\ndef init_seeds(seed=0, deterministic=False):\n    if deterministic and torch.__version__ >= '1.12':\n        torch.use_deterministic_algorithms(True)\n",
        "import torch\nprint(torch.are_deterministic_algorithms_enabled())\n",
        "import torch\ntorch.backends.cudnn.deterministic = args.deterministic\n",
        "import torch\nclass Flags:\n    deterministic = True\n",
        "def use_deterministic_algorithms(x):\n    pass\nimport torch\nuse_deterministic_algorithms(True)\n",
        "import torch\ndef enable_full_determinism():\n    torch.use_deterministic_algorithms(True)\n    torch.backends.cudnn.deterministic = True\n",
        "import torch\nclass DeterministicEngine:\n    def _init_run(self):\n        torch.use_deterministic_algorithms(True, warn_only=True)\n",
        "import torch\ndef make_reproducible(seed):\n    torch.manual_seed(seed)\n    torch.backends.cudnn.deterministic = True\n",
    ],
)
def test_tl502_near_misses(code):
    assert run(code, "TL502") == []


def test_tl502_skips_test_files():
    code = "import torch\ntorch.use_deterministic_algorithms(True)\n"
    assert run(code, "TL502", path="tests/test_model.py") == []
    assert codes(run(code, "TL502", path="scripts/train.py")) == ["TL502"]


# -- TL506 -------------------------------------------------------------------


def test_tl506_reports_at_the_call_naming_the_sizes():
    code = "from torch import nn\nhead = nn.Linear(768, 50257, bias=False)\nemb = nn.Embedding(50257, 1030)\n"
    diagnostics = run(code, "TL506")
    assert [(d.line, d.column) for d in diagnostics] == [(2, 8), (3, 7)]
    assert "`out_features=50257`" in diagnostics[0].message and "50304" in diagnostics[0].message
    assert "`num_embeddings=50257` and `embedding_dim=1030`" in diagnostics[1].message
    assert "50304 and 1088" in diagnostics[1].message


@pytest.mark.parametrize(
    "code",
    [
        "import torch\nhead = torch.nn.Linear(in_features=50257, out_features=768)\n",
        "import torch.nn as nn\nhead = nn.modules.linear.Linear(768, 32_001)\n",
        "from torch.nn import *\nhead = Linear(768, 1025)\n",
        "import torch.nn as nn\nwte = nn.Embedding(embedding_dim=768, num_embeddings=50257)\n",
    ],
)
def test_tl506_positives(code):
    assert codes(run(code, "TL506")) == ["TL506"]


@pytest.mark.parametrize(
    "code",
    [
        "from torch import nn\nhead = nn.Linear(768, 50304)\n",
        "from torch import nn\nfc = nn.Linear(9216, 128)\n",
        "from torch import nn\nfc = nn.Linear(2048, 1000)\n",
        "from torch import nn\nhead = nn.Linear(cfg.n_embd, cfg.vocab_size)\n",
        "from torch import nn\nmlp = nn.Linear(4 * 768, 768)\n",
        "from torch import nn\nemb = nn.Embedding(1000, 768)\n",
        "from torch import nn\nconv = nn.Conv2d(3, 1025, 3)\n",
        "from torch import nn\nhead = nn.Linear(768, **sizes)\n",
        "import torch\nfrom mylib import Linear\nhead = Linear(768, 50257)\n",
    ],
)
def test_tl506_near_misses(code):
    assert run(code, "TL506") == []


# -- TL507 -------------------------------------------------------------------


@pytest.mark.parametrize(
    "code",
    [
        "import torch\nwith torch.autograd.profiler.profile(use_cuda=True) as prof:\n    step()\n",
        "import torch\nwith torch.autograd.profiler.profile(True, record_shapes=True) as prof:\n    step()\n",
        "import torch\nwith torch.autograd.profiler.profile(enabled=True):\n    step()\n",
        "from torch.autograd import profiler\nwith profiler.emit_nvtx():\n    step()\n",
        "import torch\nok = torch.autograd.gradgradcheck(fn, inputs)\n",
        "from torch.autograd.gradcheck import gradcheck\ndef train():\n    gradcheck(layer, (x,))\n",
    ],
)
def test_tl507_positives(code):
    assert codes(run(code, "TL507")) == ["TL507"]


@pytest.mark.parametrize(
    "code",
    [
        "import torch\nwith torch.autograd.profiler.profile(enabled=False):\n    step()\n",
        "import torch\nwith torch.autograd.profiler.profile(args.profile):\n    step()\n",
        "import torch\nwith torch.autograd.profiler.profile(**profiler_kwargs):\n    step()\n",
        "import torch\nwith torch.profiler.profile(schedule=torch.profiler.schedule(wait=1, warmup=1, active=3)):\n    step()\n",
        "import torch\nwith torch.autograd.profiler.record_function('data'):\n    step()\n",
        "import torch\nif cfg.debug:\n    ok = torch.autograd.gradcheck(fn, inputs)\n",
        "import torch\ndef profile_one_step(model, x):\n    with torch.autograd.profiler.profile() as prof:\n        model(x)\n    return prof\n",
        "import torch\ndef check_gradients(fn, x):\n    return torch.autograd.gradcheck(fn, (x,))\n",
        "import torch\nassert isinstance(p, torch.autograd.profiler.profile)\n",
        "import torch\ngrads = torch.autograd.grad(loss, params)\n",
        "import torch\nclass AutogradProfiler(Hook):\n    def before_step(self):\n        self._prof = torch.autograd.profiler.profile(use_cuda=True)\n        self._prof.__enter__()\n",
    ],
)
def test_tl507_near_misses(code):
    assert run(code, "TL507") == []


def test_tl507_skips_test_and_profiling_files():
    code = "import torch\nwith torch.autograd.profiler.profile() as prof:\n    step()\n"
    assert codes(run(code, "TL507", path="train.py")) == ["TL507"]
    for path in ("tests/test_ops.py", "ops_test.py", "tools/profile_model.py", "benchmark.py"):
        assert run(code, "TL507", path=path) == []


# -- cost: one shared collection of facts --------------------------------------


def test_rules_share_one_walk_of_facts():
    from torchlint.rule import Context
    from torchlint.rules._program import facts_for
    from tests.helpers import settings_for

    ctx = Context("train.py", "", settings_for(["TL5"]))
    assert facts_for(ctx) is facts_for(ctx)
    # all four module rules together give the same answers as each alone
    together = positions(CONV_SCRIPT, ["TL501", *MODULE_RULES])
    alone = sorted(p for code in ["TL501", *MODULE_RULES] for p in positions(CONV_SCRIPT, code))
    assert sorted(together) == alone


def test_tl503_silent_for_a_named_convolutional_family():
    """A ResNet built elsewhere (`torchvision.models.resnet50()`, `--arch
    resnet50`) is convolutions: its linear head is not worth TF32."""
    for model in ("torchvision.models.resnet50()", "models.__dict__['resnet50']()"):
        code = SCRIPT.replace("nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 10))", model)
        assert run(code, "TL503") == []


def test_tl505_silent_for_recurrent_models():
    """cuDNN's fused LSTM kernels and variable lengths leave little to compile."""
    lstm = SCRIPT.replace("nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 10))", "nn.LSTM(1024, 1024)")
    assert run(lstm, "TL505") == []
    assert codes(run(SCRIPT, "TL505")) == ["TL505"]


# -- the names and string literals of a module, read from its text -------------------

TOKENS = '''\
import re  # a "quoted" word in a comment: autocast
x = 'it''s' + "a \\"half\\" string" + r'raw\\\\' + b"bytes"
doc = """A docstring with 'quotes', "more" and a \\
continued line: torch.compile"""
other = \'\'\'triple 'single' quotes: bfloat16\'\'\'
log = f"{args.amp} {{not_a_field}} steps" + rf"{model_name}"
pattern = re.compile(r"\\d+")
'''


def test_a_modules_names_and_strings_are_read_from_its_text():
    from torchlint.rules._program import _compiles_other_than_regex, _tokens

    compile(TOKENS, "tokens.py", "exec")  # (valid Python)
    names, strings, code = _tokens(TOKENS)
    assert {"import", "re", "x", "doc", "other", "log", "args", "amp", "model_name", "pattern", "compile"} <= names
    assert not names & {"autocast", "quoted", "half", "raw", "docstring", "continued", "torch", "bfloat16",
                        "not_a_field", "steps", "d"}
    raw = TOKENS[TOKENS.index("r'raw"):TOKENS.index(" + b")]
    assert strings == ["'it'", "'s'", '"a \\"half\\" string"', raw, 'b"bytes"',
                       '"""A docstring with \'quotes\', "more" and a \\\ncontinued line: torch.compile"""',
                       "'''triple 'single' quotes: bfloat16'''", 'r"\\d+"']
    assert not _compiles_other_than_regex(code)
    assert _compiles_other_than_regex(code + "model = torch.compile(model)\n")
