"""The quality loop: what people say of the records (end-user feedback, reviewer verdicts), how often the judge
agrees with them, and the datasets made of both."""
