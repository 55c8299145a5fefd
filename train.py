"""`accelerate launch train.py --recipe recipes/dapo.yaml`: see `hf_grpo/train.py` for the steps."""

from hf_grpo.train import main

if __name__ == "__main__":
    main()
