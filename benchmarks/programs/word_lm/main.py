"""Word-level language modelling with an LSTM, modelled on pytorch/examples'
word_language_model/main.py.

Adapted for `torchlint verify` evidence: `data.Corpus` generates a Zipf-like
synthetic corpus instead of reading Wikitext-2 (so it runs offline), only the
LSTM/GRU models are kept (not the Transformer), and the export/save/dry-run
options are left out. The training loop is the example's: truncated BPTT with
`repackage_hidden`, `model.zero_grad()`, gradient clipping, a manual SGD update
of `p.data`, a running `total_loss += loss.item()` logged every
`--log-interval` batches, and an evaluation pass after each epoch.
"""

import argparse
import math
import time

import torch
import torch.nn as nn

import data
import model as models

parser = argparse.ArgumentParser(description="Word-level LSTM language model (synthetic corpus)")
parser.add_argument("--model", type=str, default="LSTM")
parser.add_argument("--emsize", type=int, default=200)
parser.add_argument("--nhid", type=int, default=200)
parser.add_argument("--nlayers", type=int, default=2)
parser.add_argument("--lr", type=float, default=20)
parser.add_argument("--clip", type=float, default=0.25)
parser.add_argument("--epochs", type=int, default=1)
parser.add_argument("--batch_size", type=int, default=20)
parser.add_argument("--bptt", type=int, default=35)
parser.add_argument("--dropout", type=float, default=0.2)
parser.add_argument("--seed", type=int, default=1111)
parser.add_argument("--log-interval", type=int, default=50)
parser.add_argument("--words", type=int, default=20000)
args = parser.parse_args()

torch.manual_seed(args.seed)
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

corpus = data.Corpus(words=args.words)


def batchify(data, bsz):
    nbatch = data.size(0) // bsz
    data = data.narrow(0, 0, nbatch * bsz)
    return data.view(bsz, -1).t().contiguous().to(device)


eval_batch_size = 10
train_data = batchify(corpus.train, args.batch_size)
val_data = batchify(corpus.valid, eval_batch_size)

ntokens = len(corpus.dictionary)
model = models.RNNModel(args.model, ntokens, args.emsize, args.nhid, args.nlayers, args.dropout).to(device)
criterion = nn.NLLLoss()


def repackage_hidden(h):
    """Detach hidden states from their history."""
    if isinstance(h, torch.Tensor):
        return h.detach()
    return tuple(repackage_hidden(v) for v in h)


def get_batch(source, i):
    seq_len = min(args.bptt, len(source) - 1 - i)
    return source[i:i + seq_len], source[i + 1:i + 1 + seq_len].view(-1)


def evaluate(data_source):
    model.eval()
    total_loss = 0.0
    hidden = model.init_hidden(eval_batch_size)
    with torch.no_grad():
        for i in range(0, data_source.size(0) - 1, args.bptt):
            inputs, targets = get_batch(data_source, i)
            output, hidden = model(inputs, hidden)
            hidden = repackage_hidden(hidden)
            total_loss += len(inputs) * criterion(output, targets).item()
    return total_loss / (len(data_source) - 1)


def train(epoch, lr):
    model.train()
    total_loss = 0.0
    start_time = time.time()
    hidden = model.init_hidden(args.batch_size)
    for batch, i in enumerate(range(0, train_data.size(0) - 1, args.bptt)):
        inputs, targets = get_batch(train_data, i)
        hidden = repackage_hidden(hidden)
        model.zero_grad()
        output, hidden = model(inputs, hidden)
        loss = criterion(output, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-lr)
        total_loss += loss.item()
        if batch % args.log_interval == 0 and batch > 0:
            cur_loss = total_loss / args.log_interval
            elapsed = time.time() - start_time
            print(f"| epoch {epoch:3d} | {batch:5d} batches | lr {lr:02.2f} | ms/batch "
                  f"{elapsed * 1000 / args.log_interval:5.2f} | loss {cur_loss:5.2f} | ppl {math.exp(cur_loss):8.2f}")
            total_loss = 0
            start_time = time.time()


lr = args.lr
best_val_loss = None
for epoch in range(1, args.epochs + 1):
    train(epoch, lr)
    val_loss = evaluate(val_data)
    print(f"| end of epoch {epoch:3d} | valid loss {val_loss:5.2f} | valid ppl {math.exp(val_loss):8.2f}")
    if not best_val_loss or val_loss < best_val_loss:
        best_val_loss = val_loss
    else:
        lr /= 4.0
