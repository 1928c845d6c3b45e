"""A word corpus: a dictionary and tokenised splits (synthetic text instead of Wikitext-2)."""

import random

import torch


class Dictionary:
    def __init__(self):
        self.word2idx = {}
        self.idx2word = []

    def add_word(self, word):
        if word not in self.word2idx:
            self.idx2word.append(word)
            self.word2idx[word] = len(self.idx2word) - 1
        return self.word2idx[word]

    def __len__(self):
        return len(self.idx2word)


class Corpus:
    """Three splits of generated sentences over a fixed vocabulary (seeded)."""

    def __init__(self, words=20000, vocabulary=2000, seed=0):
        rng = random.Random(seed)
        vocab = [f"w{i}" for i in range(vocabulary)]
        weights = [1.0 / (i + 1) for i in range(vocabulary)]  # Zipf-like, as in real text
        self.dictionary = Dictionary()
        self.train = self.tokenize(rng.choices(vocab, weights, k=words))
        self.valid = self.tokenize(rng.choices(vocab, weights, k=words // 10))
        self.test = self.tokenize(rng.choices(vocab, weights, k=words // 10))

    def tokenize(self, words):
        ids = []
        for i, word in enumerate(words):
            ids.append(self.dictionary.add_word(word))
            if i % 20 == 19:
                ids.append(self.dictionary.add_word("<eos>"))
        return torch.tensor(ids, dtype=torch.int64)
