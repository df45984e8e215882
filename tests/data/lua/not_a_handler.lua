-- on_* globals must be functions.
on_epoch_end = 5
