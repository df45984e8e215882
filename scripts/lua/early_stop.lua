-- early_stop.lua: stop training when the validation metrics stop improving.
--
-- GCN (Kipf & Welling, ICLR 2017, §5.2): "we stop training if the validation loss does
-- not decrease for 10 consecutive epochs" -- the default here: patience 10 on val_loss.
-- (Their code, gcn/train.py, compares the last validation loss with the mean of the ten
-- before it instead; this policy follows the paper's sentence.)
--
-- GAT (Velickovic et al., ICLR 2018, §3.3) stops "on both the cross-entropy loss and
-- accuracy ... on the validation nodes, with a patience of 100 epochs": training goes on
-- while either of them improves, and stops once NEITHER the loss decreased NOR the
-- accuracy increased for `patience` epochs. monitor = "val_loss+val_accuracy" does that.
--
-- params (policy.params in the run's YAML):
--   patience   epochs without improvement before stopping            (default 10)
--   monitor    "val_loss" or "val_loss+val_accuracy"                  (default "val_loss")
--   min_delta  how much a metric must beat its best to count as improved  (default 0)
--   ties       true: a value equal to the best counts as improved (GAT's code) (default false)
--
-- Metrics read in on_epoch_end: val_loss, val_accuracy (GAT mode only), epoch (optional;
-- the calls are counted when it is missing). Improvement is strict: a loss lower than the
-- best so far, an accuracy higher. (GAT's reference code counts a tie as improvement,
-- `val_acc >= vacc_mx`; on a plateau of equal accuracies it keeps going where this stops.)
--
-- When it fires it returns
--   {stop = true, reason = "early stopping: val_loss has not improved for 10 epochs
--                           (best 0.7123 at epoch 42)"}
-- and keeps returning it if it is called again.
--
-- The state lives in the file-level locals below (upvalues of on_epoch_end): globals are
-- read-only once set-up is over. Nothing here depends on time or randomness, so the core
-- rebuilds the state on resume by replaying the metrics of the epochs already done.

local patience = math.tointeger(params.patience or 10)
local monitor = params.monitor or "val_loss"
local min_delta = params.min_delta or 0

if not patience or patience < 1 then
  error(("params.patience must be a positive integer, got %s"):format(tostring(params.patience)))
end
if monitor ~= "val_loss" and monitor ~= "val_loss+val_accuracy" then
  error(('params.monitor must be "val_loss" or "val_loss+val_accuracy", got %q')
        :format(tostring(monitor)))
end
if type(min_delta) ~= "number" or min_delta < 0 then
  error(("params.min_delta must be a number >= 0, got %s"):format(tostring(min_delta)))
end

-- ties = true counts an equal value as an improvement, as GAT's execute_cora.py does
-- (`val_acc >= vacc_mx or val_loss <= vlss_mn`): on a plateau of equal accuracies it
-- keeps training.
local ties = params.ties == true

local with_accuracy = monitor == "val_loss+val_accuracy"

local best_loss, best_loss_epoch = math.huge, nil
local best_accuracy, best_accuracy_epoch = -math.huge, nil
local epochs_without_improvement = 0
local calls = 0

local function metric(m, name)
  local value = m[name]
  if type(value) ~= "number" then
    error(("early_stop.lua needs the metric '%s', got %s"):format(name, type(value)), 2)
  end
  return value
end

local function best(value, epoch)
  if epoch == nil then
    return "none yet"
  end
  return ("%.4f at epoch %s"):format(value, tostring(math.tointeger(epoch) or epoch))
end

function on_epoch_end(m)
  calls = calls + 1
  local epoch = m.epoch or calls
  local improved = false

  local loss = metric(m, "val_loss")
  if loss < best_loss - min_delta or (ties and loss <= best_loss) then
    best_loss, best_loss_epoch, improved = loss, epoch, true
  end
  if with_accuracy then
    local accuracy = metric(m, "val_accuracy")
    if accuracy > best_accuracy + min_delta or (ties and accuracy >= best_accuracy) then
      best_accuracy, best_accuracy_epoch, improved = accuracy, epoch, true
    end
  end

  if improved then
    epochs_without_improvement = 0
    return nil
  end
  epochs_without_improvement = epochs_without_improvement + 1
  if epochs_without_improvement < patience then
    return nil
  end

  local reason
  if with_accuracy then
    reason = ("early stopping: neither val_loss nor val_accuracy has improved for %d epochs"
              .. " (best val_loss %s, best val_accuracy %s)")
             :format(epochs_without_improvement, best(best_loss, best_loss_epoch),
                     best(best_accuracy, best_accuracy_epoch))
  else
    reason = ("early stopping: val_loss has not improved for %d epochs (best %s)")
             :format(epochs_without_improvement, best(best_loss, best_loss_epoch))
  end
  return {stop = true, reason = reason}
end
