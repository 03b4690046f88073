"""Teacher–student distillation (Burian 2023): the two teachers whose vectors the student learns from."""
