# The cross-datacenter rules were one resource each (and one for_each for the loaders) before they became
# main.tf's live_from_offline: these keep an existing deployment's rules in place instead of replacing them.
moved {
  from = aws_vpc_security_group_ingress_rule.live_brokers_from_offline_brokers
  to   = aws_vpc_security_group_ingress_rule.live_from_offline["mirror_links_kafka"]
}

moved {
  from = aws_vpc_security_group_ingress_rule.live_zookeeper_from_offline_brokers
  to   = aws_vpc_security_group_ingress_rule.live_from_offline["mirror_links_zookeeper"]
}

moved {
  from = aws_vpc_security_group_ingress_rule.live_brokers_from_offline_mirror
  to   = aws_vpc_security_group_ingress_rule.live_from_offline["mirror_kafka"]
}

moved {
  from = aws_vpc_security_group_ingress_rule.live_zookeeper_from_offline_mirror
  to   = aws_vpc_security_group_ingress_rule.live_from_offline["mirror_zookeeper"]
}

moved {
  from = aws_vpc_security_group_ingress_rule.live_from_offline_loader["broker"]
  to   = aws_vpc_security_group_ingress_rule.live_from_offline["loader_kafka"]
}

moved {
  from = aws_vpc_security_group_ingress_rule.live_from_offline_loader["zookeeper"]
  to   = aws_vpc_security_group_ingress_rule.live_from_offline["loader_zookeeper"]
}

moved {
  from = aws_vpc_security_group_ingress_rule.live_from_offline_loader["broker_metrics"]
  to   = aws_vpc_security_group_ingress_rule.live_from_offline["loader_metrics"]
}
