"""The project's own PPO (TRL 1.16 has no PPOTrainer): pure tensor pieces in `core`, the value model in
`value`, the training loop in `trainer`. The mode module `backend.modes.ppo` builds it from a run config."""
