"""One measured training run: the recipe (`run`), building the Trainer (`trainer`), adapting
settings to the machine (`adapt`), checkpoints and interrupts (`checkpoints`), resume
(`resume`) and data-parallel jobs (`distributed`)."""
