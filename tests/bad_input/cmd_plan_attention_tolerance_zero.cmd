plan
attention
--docs
16/8
--tolerance
0
