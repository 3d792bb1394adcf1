"""The pair classifier every local-judge training script fits: a BERT encoder, mean pooling over the attention
mask (as all-MiniLM-L6-v2 pools), one logit. In a module of its own that imports nothing but torch, so that
``reader_distil.py`` can run on a GPU machine that has none of the collector's dependencies."""

from __future__ import annotations

from typing import Any

import torch


class PairClassifier(torch.nn.Module):
    """``encoder`` (a transformers ``BertModel``) → masked mean of its last hidden states → dropout → one logit."""

    def __init__(self, encoder: Any) -> None:
        super().__init__()
        self.encoder = encoder
        self.dropout = torch.nn.Dropout(0.1)
        self.head = torch.nn.Linear(encoder.config.hidden_size, 1)

    def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
        hidden = self.encoder(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
        ).last_hidden_state
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        return self.head(self.dropout(pooled)).squeeze(-1)
