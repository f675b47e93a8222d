"""The store's layout, as other modules' Lua scripts may use it.

The gateway's work queue reads a conversation and its tasks, and writes a queued task's
first state, in the same atomic step as its own changes (one round trip per message). It
does so only through these Lua functions, owned here beside the store that defines the
layout, and prepended to the scripts that call them (``LUA + script``):

- ``hermes_save_task(task_key, conv_tasks, task_id, state, ttl, if_new)``: a task's state
  (JSON) under ``Keys.task`` (``ttl`` seconds, 0 for none; ``if_new``: only if it has none
  yet), its id added to the conversation's ``Keys.conv_tasks``
- ``hermes_read_task(task_prefix, task_id)``: a task's state, or false (``task_prefix`` is
  ``Keys.task("")``)
- ``hermes_waiting_task(meta, task_prefix)``: the state of the task that waits for the
  conversation's next message (ask_user), or false
- ``hermes_read_conversation(window, meta)``: ``{window items, meta field/value list}``,
  what ``RedisConversationStore.parse_snapshot`` turns into a Snapshot

The store's own append script uses the same functions, so "save a task" and "read a
conversation" are written once.
"""

from __future__ import annotations

LUA = """
local function hermes_save_task(task_key, conv_tasks, task_id, state, ttl, if_new)
  if if_new then
    redis.call('SET', task_key, state, 'NX')
  elseif tonumber(ttl) > 0 then
    redis.call('SET', task_key, state, 'EX', ttl)
  else
    redis.call('SET', task_key, state)
  end
  redis.call('SADD', conv_tasks, task_id)
end

local function hermes_read_task(task_prefix, task_id)
  return redis.call('GET', task_prefix .. task_id)
end

local function hermes_waiting_task(meta, task_prefix)
  local waiting = redis.call('HGET', meta, 'waiting_task')
  if waiting and waiting ~= '' then
    return hermes_read_task(task_prefix, waiting)
  end
  return false
end

local function hermes_read_conversation(window, meta)
  return {redis.call('LRANGE', window, 0, -1), redis.call('HGETALL', meta)}
end
"""
