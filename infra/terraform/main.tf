# ferry's two datacenters: "live" takes the producers' traffic, "offline" runs the mirror (which
# reads the live cluster across the datacenter link) and the hourly warehouse loads.

module "live" {
  source             = "./modules/datacenter"
  name               = "live"
  vpc_cidr           = var.live.vpc_cidr
  availability_zones = var.availability_zones
  ami_id             = var.ami_id
  key_name           = var.key_name
  admin_cidr_blocks  = var.admin_cidr_blocks
  client_cidr_blocks = var.app_cidr_blocks
  zookeeper_count    = var.live.zookeeper_count
  broker_count       = var.live.broker_count
  mirror_count       = 0
  loader_count       = 0
  ports              = var.ports
  security           = var.security
  zookeeper_tls      = var.zookeeper_tls
  tags               = var.tags
}

module "offline" {
  source             = "./modules/datacenter"
  name               = "offline"
  vpc_cidr           = var.offline.vpc_cidr
  availability_zones = var.availability_zones
  ami_id             = var.ami_id
  key_name           = var.key_name
  admin_cidr_blocks  = var.admin_cidr_blocks
  zookeeper_count    = var.offline.zookeeper_count
  broker_count       = var.offline.broker_count
  mirror_count       = var.offline.mirror_count
  loader_count       = var.offline.loader_count
  spark_worker_count = var.offline.spark_worker_count
  ports              = var.ports
  spark_ports        = var.spark_ports
  security           = var.security
  zookeeper_tls      = var.zookeeper_tls
  tags               = var.tags
}

# The datacenter link: VPC peering, routed both ways.
resource "aws_vpc_peering_connection" "live_offline" {
  vpc_id      = module.offline.vpc_id
  peer_vpc_id = module.live.vpc_id
  auto_accept = true
  tags        = { Name = "ferry-offline-to-live" }
}

resource "aws_route" "offline_to_live" {
  route_table_id            = module.offline.private_route_table_id
  destination_cidr_block    = module.live.vpc_cidr
  vpc_peering_connection_id = aws_vpc_peering_connection.live_offline.id
}

resource "aws_route" "live_to_offline" {
  route_table_id            = module.live.private_route_table_id
  destination_cidr_block    = module.offline.vpc_cidr
  vpc_peering_connection_id = aws_vpc_peering_connection.live_offline.id
}

locals {
  # The Kafka port across the link: SASL_SSL's (var.security); the plaintext port never crosses it.
  kafka_port = var.security == "plaintext" ? var.ports.broker : var.ports.broker_tls
  # ZooKeeper across the link: its TLS port (secureClientPort, 2281) with var.zookeeper_tls; 2181 then stays on
  # the ZooKeeper hosts' loopback.
  zookeeper_port = var.zookeeper_tls && var.security != "plaintext" ? var.ports.zookeeper_tls : var.ports.zookeeper
}
# Across the link only the mirror and the loaders of the offline datacenter talk, each to what it reads of the live
# one: SASL_SSL to the brokers, HTTPS to their /metrics, ZooKeeper's TLS port with var.zookeeper_tls, else its
# plaintext client port (its znodes are locked with a digest identity either way; docs/infra.md "Secure by
# default"). One rule per entry: the offline group that connects (from), the live group it reaches (to), the port,
# and the rule's description. (Each was a resource of its own before: moved.tf keeps deployed rules in place.)
locals {
  live_ingress = merge({
    # The offline brokers run the mirror links (the embedded mirror, Ansible's default ferry_mirror_kind: link),
    # whose partition leaders fetch from the live brokers and read the live ZooKeeper (topics, partition
    # leaders, the schema registry's copy).
    mirror_links_kafka     = { from = "broker", to = "broker", port = local.kafka_port, what = "Kafka protocol: the offline brokers' mirror links" }
    mirror_links_zookeeper = { from = "broker", to = "zookeeper", port = local.zookeeper_port, what = "ZooKeeper: the offline brokers' mirror links" }
    # The standalone mirror hosts (mirror_count): fetch, and their consumer group in the live ZooKeeper
    # (registrations, ownership, offsets).
    mirror_kafka     = { from = "mirror", to = "broker", port = local.kafka_port, what = "Kafka protocol: the offline mirror" }
    mirror_zookeeper = { from = "mirror", to = "zookeeper", port = local.zookeeper_port, what = "ZooKeeper: the offline mirror's consumer group" }
    }, var.offline.loader_count > 0 ? {
    # The loaders: the producers' counts as the live datacenter knows them decide completeness (the loads' books
    # and `ferry dashboard --live-zookeeper`: the live ZooKeeper, then the live brokers' `_audit` and log ends for
    # the mirror's lag), and their Prometheus scrapes the live brokers' metrics.
    loader_kafka     = { from = "loader", to = "broker", port = local.kafka_port, what = "Kafka protocol (live audit counts, log ends): the offline loaders" }
    loader_zookeeper = { from = "loader", to = "zookeeper", port = local.zookeeper_port, what = "ZooKeeper (live brokers and topics): the offline loaders" }
    loader_metrics   = { from = "loader", to = "broker", port = var.ports.broker_metrics, what = "Prometheus metrics: the offline loaders" }
  } : {})
}

resource "aws_vpc_security_group_ingress_rule" "live_from_offline" {
  for_each                     = local.live_ingress
  security_group_id            = module.live.security_group_ids[each.value.to]
  description                  = each.value.what
  ip_protocol                  = "tcp"
  from_port                    = each.value.port
  to_port                      = each.value.port
  referenced_security_group_id = module.offline.security_group_ids[each.value.from]
  depends_on                   = [aws_vpc_peering_connection.live_offline]
}
