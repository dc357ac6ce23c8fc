"""A team's dataset processor, as the rehearsal runs one: MaxText's own ``process_data``
(maxtext 0.2.4 trainers/post_train/rl/utils_rl.py) behind the name the recipe's
``dataset_processor`` file must define, so training sees the rows it always did and the
test proves only that the file is the one MaxText used (its "using custom process_data"
log line).

It imports ``multiprocessing.pool`` first: ``utils_rl`` uses it as an attribute without
importing it (images/rehearsal/train_rl_cpu.py, point 1).
"""

import multiprocessing.pool  # noqa: F401

from maxtext.trainers.post_train.rl import utils_rl


def process_data(dataset_name, tokenizer, template, config, x):
    return utils_rl.process_data(dataset_name, tokenizer, template, config, x)
