from hf_grpo.rollout.sampler import RepeatPromptSampler


def test_each_round_repeats_a_block_and_processes_get_disjoint_prompts():
    sampler = RepeatPromptSampler(10, prompts_per_process=2, num_processes=2, repeats=3, seed=1)
    order = list(sampler)
    assert len(order) == len(sampler) == 2 * 4 * 3  # 2 full rounds of 4 prompts, 3 repeats each
    first = order[:4]
    assert order[4:8] == first and order[8:12] == first
    # accelerate gives batch k (size 2) to process k % 2: process 0 gets first[:2], process 1 first[2:]
    batches = [order[i : i + 2] for i in range(0, len(order), 2)]
    assert set(batches[0]).isdisjoint(batches[1])
    assert batches[0] == batches[2] == batches[4]


def test_seeded_and_epoch_dependent():
    a = RepeatPromptSampler(50, 4, 1, 1, seed=3)
    b = RepeatPromptSampler(50, 4, 1, 1, seed=3)
    assert list(a) == list(b)
    b.set_epoch(1)
    assert list(a) != list(b)
