"""Step 3: fine-tune an encoder on a data directory with one of the project's objectives.

  accelerate launch 03_train.py --objective triplet --data work/fi/data --model TurkuNLP/bert-base-finnish-cased-v1 \\
      --out runs/wikispecter
  python 03_train.py ...            (one process)

Objectives and where their defaults come from (`03_train.py --objective NAME --help` lists each one's flags):
  triplet      SPECTER / WikiSpecter: L2 triplet margin loss on (query, linked, negative) documents
  contrastive  key-sentence thesis: contrastive loss on (query, sentence, key?) pairs, cosine distance
  cosine       key-sentence thesis: MSE between cos(query, sentence) and the 0/1 label
  mlm          paper search, stage 1: masked-language-model domain adaptation on abstracts (transformers'
               run_mlm_no_trainer.py)
  mnrl         paper search, stage 2: Multiple Negatives Ranking, title → abstract with in-batch negatives
               (sentence-transformers' MultipleNegativesRankingLoss)

Mixed precision and the number of GPUs come from `accelerate config` / `accelerate launch`. A run writes
RUN/model (Hugging Face + sentence-transformers), RUN/checkpoints/step_N and RUN/log.jsonl; starting again with
the same --out resumes from the newest checkpoint. SIGTERM saves a checkpoint and exits with status 143.
"""

import sys

from common import cli
from common.train import objectives, run


def main(argv):
    args = run.parse(argv, __doc__, objectives.names("03_train.py"))
    if args.seeds:
        return run.train_seeds(args, __file__)
    return run.train(args, __file__)


if __name__ == "__main__":
    cli.run(lambda: main(sys.argv[1:]))
