"""A Hugging Face text classifier fine-tuned as its examples write it, on the lazy device:
a fast tokenizer (built here from a tiny corpus with `tokenizers`: no download), a tiny
BERT from its config, `DataCollatorWithPadding` in a DataLoader (each batch padded to
its own longest sentence), and with --adamw the examples' AdamW, linear schedule and
`clip_grad_norm_`. Every batch length is a new set of shapes: a recompile per length,
and with --adamw hundreds of big distinct graphs (clip_grad_norm_ falls back per
parameter).

    python bert_classifier.py [--steps 12] [--batch-size 4] [--adamw] [--mask-4d]
"""
import argparse
import random

import torch
import torch._lazy
import torch._lazy.ts_backend
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from torch.utils.data import DataLoader
from transformers import (
    BertConfig,
    BertForSequenceClassification,
    DataCollatorWithPadding,
    PreTrainedTokenizerFast,
    get_linear_schedule_with_warmup,
)

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=12)
parser.add_argument("--batch-size", type=int, default=4)
parser.add_argument("--adamw", action="store_true")
# lazyviz's advice for the mask transformers checks on the host: eager attention, and the
# mask passed as a 4D additive one, which transformers uses as given.
parser.add_argument("--mask-4d", action="store_true")
args = parser.parse_args()

torch._lazy.ts_backend.init()
torch.manual_seed(0)
generator = random.Random(0)
words = [f"w{i}" for i in range(300)]
sentences = [" ".join(generator.choice(words) for _ in range(generator.randint(3, 30)))
             for _ in range(args.steps * args.batch_size)]
labels = [generator.randint(0, 1) for _ in sentences]

backend = Tokenizer(models.WordPiece(unk_token="[UNK]"))
backend.pre_tokenizer = pre_tokenizers.Whitespace()
backend.train_from_iterator(sentences, trainers.WordPieceTrainer(
    vocab_size=400, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"], show_progress=False))
tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="[PAD]", unk_token="[UNK]",
                                    cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]")

features = [{**tokenizer(text, truncation=True, max_length=64), "labels": label}
            for text, label in zip(sentences, labels)]
loader = DataLoader(features, batch_size=args.batch_size, shuffle=False,
                    collate_fn=DataCollatorWithPadding(tokenizer))

config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                    intermediate_size=64, max_position_embeddings=64, num_labels=2,
                    attn_implementation="eager" if args.mask_4d else None)
device = torch.device("lazy")
model = BertForSequenceClassification(config).to(device)
if args.adamw:
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-5)
    scheduler = get_linear_schedule_with_warmup(optimizer, num_warmup_steps=2, num_training_steps=args.steps)
else:
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
    scheduler = None

model.train()
for batch in loader:
    if args.mask_4d:
        batch["attention_mask"] = (1.0 - batch["attention_mask"][:, None, None, :].float()) * torch.finfo(torch.float32).min
    batch = {name: tensor.to(device) for name, tensor in batch.items()}
    loss = model(**batch).loss
    loss.backward()
    if args.adamw:
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    if scheduler is not None:
        scheduler.step()
    optimizer.zero_grad()
    torch._lazy.mark_step()
print(f"loss {loss.item():.4f}")
