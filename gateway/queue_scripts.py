"""The work queue's Lua scripts (``gateway.queue``): each step of its protocol runs as one
atomic script on the server. Names in upper case are the script texts; the comment above
each says what its KEYS and ARGV are and what it returns."""

from __future__ import annotations

from agent_core.store import layout

# The head item, counted as started, with what a worker needs to start it: the item's task
# state, the state of a task of the conversation that waits for a reply, and the
# conversation's window and meta hash, which the task's first model call reads (one round
# trip, through the store's layout functions; the task keys are built from the
# conversation's task prefix, ``Keys.task_prefix``: on a cluster its tasks' ids name its
# shard, so their keys are in the slot of the script's own). Flags left by an earlier task
# are cleared.
READ_HEAD = layout.LUA + """
local function read_head(queue, attempts, control, meta, window, task_prefix)
  local raw = redis.call('LINDEX', queue, 0)
  if not raw then
    return {false, 0, false, false, {}, {}}
  end
  local item = cjson.decode(raw)
  redis.call('DEL', control)
  local started = redis.call('HINCRBY', attempts, item['id'], 1)
  local conversation = hermes_read_conversation(window, meta)
  return {raw, started, hermes_read_task(task_prefix, item['task_id']),
          hermes_waiting_task(meta, task_prefix), conversation[1], conversation[2]}
end
"""

# Queue an item (or, in steer mode, hand it to the running task when it is a message from
# the person whose task runs: the same channel and user as the head item, a message or an
# approval being applied, not a scheduled run or a workflow; anyone else's message would
# run with that person's role and approvals), unless its dedupe key was seen. A held
# conversation is not woken: its holder takes the item when it completes the one before
# (COMPLETE reads the next head in the same step), or, if the holder dies, any worker does
# from `pending` once the lease has expired; in interrupt mode the running task is
# flagged when the message is its requester's (anyone else's waits its turn). A free one
# is taken, given a lease token (this process has a free worker): its lock, with the head
# read as a claim does; otherwise a worker of any replica is woken. The dedupe marker holds
# the task's id, and so does the marker of the message's own identity where it is another
# key (Telegram's chat and message id): an edit of the message finds its task through it
# (gateway/edits.py). The collect mode queues as the queue mode does (gateway/collect.py).
# KEYS: dedupe (the queue's key when none), queue, pending, wake, steer, lock, task,
#       conv_tasks, attempts, control, meta, window, message marker (the queue's key when
#       none: every key of a script is in the conversation's slot, none is '')
# ARGV: item, cid, now, dedupe_ttl, mode, task_state, task_id, token, lease_ms, task prefix
# Returns {status} or {'taken', head...} when the lock was taken.
INGEST = READ_HEAD + """
if KEYS[1] ~= KEYS[2] then
  if redis.call('SET', KEYS[1], ARGV[7], 'NX', 'EX', ARGV[4]) == false then
    -- A write (the marker's time to live, renewed), so that with replica acknowledgements
    -- (link.py) "duplicate" is answered only once the replicas have every write before
    -- this one, the first delivery's included, wherever it came from.
    redis.call('EXPIRE', KEYS[1], ARGV[4])
    return {'duplicate'}
  end
end
if KEYS[13] ~= KEYS[2] then
  redis.call('SET', KEYS[13], ARGV[7], 'EX', ARGV[4])
end
local busy = redis.call('EXISTS', KEYS[6]) == 1
local own = false
if busy and ARGV[5] ~= 'queue' and redis.call('LLEN', KEYS[2]) > 0 then
  local running = cjson.decode(redis.call('LINDEX', KEYS[2], 0))
  local arriving = cjson.decode(ARGV[1])
  own = (running['kind'] == 'message' or running['kind'] == 'approval')
     and arriving['kind'] == 'message'
     and running['inbound']['channel'] == arriving['inbound']['channel']
     and running['inbound']['user_id'] == arriving['inbound']['user_id']
end
if ARGV[5] == 'steer' and own then
  redis.call('RPUSH', KEYS[5], ARGV[1])
  return {'steered'}
end
redis.call('RPUSH', KEYS[2], ARGV[1])
redis.call('ZADD', KEYS[3], 'NX', ARGV[3], ARGV[2])
if ARGV[6] ~= '' then
  hermes_save_task(KEYS[7], KEYS[8], ARGV[7], ARGV[6], 0, true)
end
if busy then
  if ARGV[5] == 'interrupt' and own then
    redis.call('HSET', KEYS[10], 'interrupt', '*')
    redis.call('EXPIRE', KEYS[10], 3600)
  end
  return {'queued'}
elseif ARGV[8] ~= '' and redis.call('SET', KEYS[6], ARGV[8], 'NX', 'PX', ARGV[9]) then
  return {'taken', unpack(read_head(KEYS[2], KEYS[9], KEYS[10], KEYS[11], KEYS[12],
                                     ARGV[10]))}
end
redis.call('RPUSH', KEYS[4], ARGV[2])
return {'queued'}
"""

# Take the conversation's lock if it is free and has queued work, and read the head with
# it. KEYS: lock, queue, attempts, control, meta, window   ARGV: token, lease_ms, task
# prefix. Returns nil if someone else holds the lock or nothing is queued (a wake whose
# item was taken by the holder it arrived behind: no lock to take and give back).
CLAIM = READ_HEAD + """
if redis.call('LLEN', KEYS[2]) == 0
   or not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return false
end
return read_head(KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], ARGV[3])
"""

# Remove the finished head item; move leftover steer messages into the queue; release the
# lock (and leave `pending`) only if nothing is left, else read the next head.
# KEYS: lock, queue, pending, steer, attempts, control, meta, window   ARGV: token, item_id,
# cid, task key prefix, now.  Returns {items left (-1: lease lost), head...}
COMPLETE = READ_HEAD + """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return {-1}
end
local head = redis.call('LINDEX', KEYS[2], 0)
if head and cjson.decode(head)['id'] == ARGV[2] then
  redis.call('LPOP', KEYS[2])
end
redis.call('HDEL', KEYS[5], ARGV[2])
local steered = redis.call('LRANGE', KEYS[4], 0, -1)
if #steered > 0 then
  redis.call('DEL', KEYS[4])
  redis.call('RPUSH', KEYS[2], unpack(steered))
  redis.call('ZADD', KEYS[3], 'NX', ARGV[5], ARGV[3])
end
local left = redis.call('LLEN', KEYS[2])
if left == 0 then
  redis.call('ZREM', KEYS[3], ARGV[3])
  redis.call('DEL', KEYS[1])
  return {0}
end
local following = read_head(KEYS[2], KEYS[5], KEYS[6], KEYS[7], KEYS[8], ARGV[4])
return {left, unpack(following)}
"""

# Give the lock back without completing, if it is still ours: the head item stays queued
# and is woken ahead of newer work; a head read but not started is uncounted. A holder
# whose lease expired changes nothing (another worker may have started the item since).
# KEYS: lock, wake, attempts   ARGV: token, cid, unstarted item id or ''.  Returns 1/0.
RELEASE = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
if ARGV[3] ~= '' then
  redis.call('HINCRBY', KEYS[3], ARGV[3], -1)
end
redis.call('LPUSH', KEYS[2], ARGV[2])
return 1
"""
